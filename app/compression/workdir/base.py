"""The Workdir's vocabulary: errors, records, the backend protocol and the path rules.

Everything here is shared by the facade (``facade.py``) and the backends (``local.py``,
``s3.py``); it imports none of them, so the package has no import cycle.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath, PureWindowsPath
from typing import Protocol

TOOL_RESULTS_DIR = "tool-results"
#: The thread's index of offloaded results (JSON lines), relative to the thread folder.
INDEX_PATH = "index.jsonl"
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
#: Bytes per streamed chunk (ReadWorkdirFile, local reads).
CHUNK_BYTES = 64 * 1024
#: Longest relative path accepted (PATH_MAX); components are limited to 255 (NAME_MAX).
MAX_PATH_CHARS = 4096


class WorkdirError(Exception):
    """The Workdir cannot be used (missing root or bucket, unwritable, I/O failure)."""


class WorkdirNotFoundError(WorkdirError, FileNotFoundError):
    """The requested file does not exist in the thread's folder."""


class WorkdirIntegrityError(WorkdirError):
    """The stored bytes no longer match the SHA-256 stored with them."""


class WorkdirPathError(ValueError):
    """A path that would leave the thread's folder (absolute, ``..``, escaping symlink...)."""


@dataclass(frozen=True, slots=True)
class OffloadRecord:
    """Where a tool result was written and how to verify it."""

    #: Path relative to the thread folder, e.g. ``tool-results/call_1.txt`` (POSIX separators).
    path: str
    #: Object key under the workdir root: ``<thread>/<path>``.
    key: str
    #: SHA-256 (hex) of the UTF-8 bytes of the full text.
    sha256: str
    chars: int
    bytes: int
    tool_call_id: str = ""
    #: The identical original was already stored (nothing was written this time).
    existed: bool = False


@dataclass(frozen=True, slots=True)
class ToolResultText:
    """One tool result to offload in a batch (``Workdir.write_tool_results``)."""

    tool_call_id: str
    text: str
    #: Extra fields of its index entry (tool, args, ids...); ``None``: not indexed.
    index: Mapping[str, object] | None = None


#: One object of a batched put: (key, bytes, SHA-256 hex).
PutItem = tuple[str, bytes, str]
#: What ``put_many`` says of one item: ``None`` (durably stored) or why it was not.
PutOutcome = WorkdirError | WorkdirPathError | None


@dataclass(frozen=True, slots=True)
class StoredObject:
    key: str
    size: int
    #: The SHA-256 stored with the object; ``None`` for objects written without one.
    sha256: str | None


class WorkdirStore(Protocol):
    """A backend: flat keys (``thread/dir/name``), whole-object atomic puts."""

    description: str

    async def check(self) -> None:
        """Raise ``WorkdirError`` when the root/bucket cannot be used."""

    async def head(self, key: str) -> StoredObject | None: ...

    async def put(self, key: str, data: bytes, sha256: str) -> None: ...

    async def put_many(self, items: Sequence[PutItem]) -> list[PutOutcome]:
        """Store several objects, each atomically; one outcome per item, in order: ``None``
        when that object is durably stored, else its error (the others are unaffected).
        Cheaper than one ``put`` per item (shared fsyncs, concurrent requests)."""
        ...

    async def open(self, key: str) -> tuple[StoredObject, AsyncIterator[bytes]]:
        """Metadata (before any byte is sent) and the body as chunks."""
        ...

    async def list_objects(self, prefix: str) -> list[StoredObject]: ...

    async def delete_prefix(self, prefix: str) -> None: ...

    async def close(self) -> None: ...


def safe_name(raw: str) -> str:
    """A file-name-safe form of an identifier: kept if ``[A-Za-z0-9_.-]``, else hashed."""
    if _SAFE_NAME.fullmatch(raw) and not raw.startswith("."):
        return raw
    return "h-" + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:40]


def check_relpath(relpath: str) -> PurePosixPath:
    """The path as POSIX parts, refusing anything that could leave the thread folder.

    Hidden components are refused too: they are the backends' own (hash sidecars, temp parts).
    """
    if not relpath or "\x00" in relpath:
        raise WorkdirPathError("empty or invalid path")
    if len(relpath) > MAX_PATH_CHARS or any(len(p) > 255 for p in relpath.split("/")):
        raise WorkdirPathError("path too long")
    posix = PurePosixPath(relpath.replace("\\", "/"))
    if posix.is_absolute() or PureWindowsPath(relpath).drive or relpath.startswith("~"):
        raise WorkdirPathError(f"absolute paths are not allowed: {relpath!r}")
    if any(part == ".." for part in posix.parts):
        raise WorkdirPathError(f"'..' is not allowed in workdir paths: {relpath!r}")
    if any(part.startswith(".") for part in posix.parts):
        raise WorkdirPathError(f"hidden names are not allowed in workdir paths: {relpath!r}")
    if not posix.parts:
        raise WorkdirPathError("empty or invalid path")
    return posix


def thread_key(thread_id: str) -> str:
    """The thread's folder name; unusual thread ids are hashed, never trusted."""
    if not thread_id:
        raise WorkdirPathError("empty thread id")
    return safe_name(str(thread_id))
