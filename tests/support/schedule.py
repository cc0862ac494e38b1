"""Slow tests first in each xdist worker's share (``tests/conftest.py`` applies it).

Why: ``scripts/test.sh`` runs ``--dist worksteal``, which first hands each worker a contiguous
share of the collection and then, as a worker runs dry, moves the *tail* of the busiest worker's
queue to it. In collection order the process, browser and generator tests (``slow``, a few
seconds to 40 s each) sat wherever their modules fell, so a worker could meet a 40 s test at the
end with nothing left to steal, and the other one idled. Dealt round-robin to the front of each
share, the long tests start at once and the short ones are what gets stolen at the end.
Applied last (``trylast``), after ``-k``, ``-m`` and ``--deselect`` left what runs, so the
shares are the ones xdist hands out.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

T = TypeVar("T")


def share_sizes(total: int, workers: int) -> list[int]:
    """How worksteal first splits ``total`` tests over ``workers`` (xdist's ``check_schedule``:
    each worker in turn gets what is left divided by the workers still to serve)."""
    sizes, left = [], total
    for k in range(workers):
        size = left // (workers - k)
        sizes.append(size)
        left -= size
    return sizes


def slow_first(
    items: Sequence[T],
    workers: int,
    is_slow: Callable[[T], bool],
    group: Callable[[T], Hashable] = id,
) -> list[T]:
    """``items`` reordered so each worker's first share starts with its part of the slow ones,
    then fast ones in collection order. Slow ones are dealt round-robin a ``group`` at a time
    (their module: a module-scoped fixture, a TLS cluster say, is then set up in one worker,
    not in each), in collection order, to the next share with room; a group larger than the
    room left is split. The same input gives the same order in every worker, as xdist
    requires."""
    if workers < 2:
        return list(items)
    groups: dict[Hashable, list[T]] = {}
    for item in items:
        if is_slow(item):
            groups.setdefault(group(item), []).append(item)
    fast = [i for i in items if not is_slow(i)]
    sizes = share_sizes(len(items), workers)
    dealt: list[list[T]] = [[] for _ in sizes]
    turn = 0
    for members in groups.values():
        for item in members:
            while len(dealt[turn % workers]) >= sizes[turn % workers]:
                turn += 1  # this share is full: the group goes on in the next one
            dealt[turn % workers].append(item)
        turn += 1
    ordered: list[T] = []
    rest = iter(fast)
    for share, size in zip(dealt, sizes, strict=True):
        share.extend(next(rest) for _ in range(size - len(share)))
        ordered.extend(share)
    return ordered
