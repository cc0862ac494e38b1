"""How checkpoints are encoded for storage, smaller than upstream's: channel versions and blobs.

Versions. LangGraph's saver numbers a channel's versions ``f"{n:032}.{random():016}"`` (~50
characters), and every checkpoint row holds them several times (``channel_versions``,
``versions_seen``), as does each blob's key. ``next_version`` writes ``n`` in decimal behind one
letter giving its digit count (``a1`` .. ``a9``, ``b10`` .. ``b99``, ...): versions still compare
correctly as strings (LangGraph compares them with ``>``), and every such version sorts after
every upstream one (those start with ``0``), so threads written before keep counting up.
Upstream's random part tells apart two versions ``n`` made from the same parent (forks). A run
that forks a thread from an earlier checkpoint (issue 36: Edit, Regenerate) writes its versions
with a tag of its own (``b12.k3x9q``, set by ``fork_tag`` for the run), carried on by the
versions made from them, so the new branch never reuses a version number the replaced branch
already wrote with other content; every other write continues its parent's numbering (a
checkpoint's blobs and row commit together), so a version is never written twice with
different content. The tag comes after the number: versions still compare by ``n``.

Blobs. Every blob and write the serializer makes is deflated (zlib, raw) with a preset dictionary
of LangChain message structure (``checkpoint_zdict_z1.bin``: serialized messages of each kind;
a delta of one or two messages is mostly key names and class paths, 3-5x smaller with it, ~1.2x
without), and its type marked ``+z1`` (``msgpack+z1``), LangGraph's own scheme for an encrypted
blob (``EncryptedSerializer``: the compressor is its "cipher"). A blob the compression does not
shrink is stored as before, and rows without the suffix (written before) read as they are. The
dictionary is part of the stored format: never change the file; a new one needs a new suffix.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import string
import zlib
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

#: Version prefixes: the digit count of ``n`` (1..26).
_LETTERS = string.ascii_lowercase


#: The version tag of the fork run in progress (None: not a fork), set around its graph stream.
FORK_TAG: ContextVar[str | None] = ContextVar("threadkeeper_fork_tag", default=None)


@contextlib.contextmanager
def fork_tag(tag: str | None) -> Iterator[None]:
    """Versions written inside carry ``tag`` (a fork run's, ``[0-9a-z]``); None changes nothing."""
    token = FORK_TAG.set(tag)
    try:
        yield
    finally:
        FORK_TAG.reset(token)


def next_version(current: str | int | None) -> str:
    """The version after ``current`` (ours, upstream's string, an int, or None for the first),
    with the fork run's tag, else ``current``'s own."""
    tag = ""
    if current is None:
        n = 0
    elif isinstance(current, int):
        n = current
    elif current[:1].isdigit():  # upstream's "<n:032>.<random>"
        n = int(current.split(".")[0])
    else:
        number, _, tag = current.partition(".")
        n = int(number[1:])
    tag = FORK_TAG.get() or tag
    digits = str(n + 1)
    if len(digits) > len(_LETTERS):
        raise OverflowError(f"channel version {digits} has more than 26 digits")
    return _LETTERS[len(digits) - 1] + digits + (f".{tag}" if tag else "")


#: The ``z1`` dictionary and its digest (checked when first used: the file must never change).
ZDICT_PATH = Path(__file__).with_name("checkpoint_zdict_z1.bin")
ZDICT_SHA256 = "022bdfab810aee30942fe9ab9ec67da56d32938ed0a6ff8d7d3bb0d56571630a"
#: Shorter serialized values are stored as they are (nothing to gain).
MIN_COMPRESS = 24
CODEC = "z1"


@functools.cache
def zdict() -> bytes:
    data = ZDICT_PATH.read_bytes()
    if hashlib.sha256(data).hexdigest() != ZDICT_SHA256:
        raise RuntimeError(f"{ZDICT_PATH} changed: blobs stored with +{CODEC} need the original")
    return data


class DeflateWithDictionary:
    """LangGraph's ``CipherProtocol``, compressing: raw deflate with the ``z1`` dictionary."""

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        packer = zlib.compressobj(6, zlib.DEFLATED, -15, zdict=zdict())
        return CODEC, packer.compress(plaintext) + packer.flush()

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        if ciphername != CODEC:
            raise ValueError(f"unknown checkpoint blob encoding +{ciphername}")
        unpacker = zlib.decompressobj(-15, zdict=zdict())
        return unpacker.decompress(ciphertext) + unpacker.flush()


class CompressingSerializer(EncryptedSerializer):
    """LangGraph's serializer, its output deflated when that makes it smaller (``<type>+z1``);
    reads both forms (``EncryptedSerializer.loads_typed``)."""

    def __init__(self, serde: SerializerProtocol | None = None) -> None:
        super().__init__(DeflateWithDictionary(), serde or JsonPlusSerializer())

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        kind, data = self.serde.dumps_typed(obj)
        if len(data) >= MIN_COMPRESS:
            codec, packed = self.cipher.encrypt(data)
            if len(packed) < len(data):
                return f"{kind}+{codec}", packed
        return kind, data


def plain(serde: SerializerProtocol) -> SerializerProtocol:
    """The serializer under the compression (digests of items need no compressing)."""
    return serde.serde if isinstance(serde, EncryptedSerializer) else serde
