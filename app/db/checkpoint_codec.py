"""How checkpoints are encoded for storage, smaller than upstream's: channel versions and blobs.

Versions. LangGraph's saver numbers a channel's versions ``f"{n:032}.{random():016}"`` (~50
characters), and every checkpoint row holds them several times (``channel_versions``,
``versions_seen``), as does each blob's key. ``next_version`` writes ``n`` in decimal behind one
letter giving its digit count (``a1`` .. ``a9``, ``b10`` .. ``b99``, ...): versions still compare
correctly as strings (LangGraph compares them with ``>``), and every such version sorts after
every upstream one (those start with ``0``), so threads written before keep counting up.
Upstream's random part tells apart two versions ``n`` made from the same parent (forks: state
updates from an older checkpoint); Threadkeeper never forks (update_state is refused, a run starts
from the latest checkpoint) and a checkpoint's blobs and row commit together, so a version
number is never written twice with different content.
"""

from __future__ import annotations

import string

#: Version prefixes: the digit count of ``n`` (1..26).
_LETTERS = string.ascii_lowercase


def next_version(current: str | int | None) -> str:
    """The version after ``current`` (ours, upstream's string, an int, or None for the first)."""
    if current is None:
        n = 0
    elif isinstance(current, int):
        n = current
    elif current[:1].isdigit():  # upstream's "<n:032>.<random>"
        n = int(current.split(".")[0])
    else:
        n = int(current[1:])
    digits = str(n + 1)
    if len(digits) > len(_LETTERS):
        raise OverflowError(f"channel version {digits} has more than 26 digits")
    return _LETTERS[len(digits) - 1] + digits
