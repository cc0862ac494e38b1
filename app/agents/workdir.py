"""Per-thread working storage where full tool results are offloaded.

Layout: ``<thread_id>/tool-results/<tool_call_id>.txt`` under the workdir root. ``Workdir`` is the
facade every caller uses (async); a ``WorkdirStore`` backend keeps the bytes: ``LocalStore`` (a
folder, the default) or ``S3Store`` (``app.agents.workdir_s3``, any S3-compatible service) so that
several hosts can read what any worker offloaded.

Semantics, identical on every backend: a put is atomic (a reader never sees half an object), the
SHA-256 is stored with the object and verified on every read (a mismatch is an error, never
served as the original), and every key is confined to the thread's own folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING, BinaryIO, Protocol

from app.agents.storable import storable_text

if TYPE_CHECKING:
    from app.config import Settings

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


@dataclass(slots=True)
class WorkdirStream:
    """An opened file: its stored SHA-256 and size first, then the verified bytes.

    Iterating re-hashes the bytes and raises ``WorkdirIntegrityError`` after the last chunk
    when they do not match (a streamed response is then cut short instead of completed).
    """

    path: str
    sha256: str
    size: int
    _chunks: AsyncIterator[bytes]

    async def __aiter__(self) -> AsyncIterator[bytes]:
        # The last chunk is held back until the hash is checked: a mismatching body is never
        # delivered whole (with a Content-Length, the client sees a truncated response).
        hasher = hashlib.sha256()
        pending: bytes | None = None
        async for chunk in self._chunks:
            if pending is not None:
                yield pending
            hasher.update(chunk)
            pending = chunk
        if hasher.hexdigest() != self.sha256:
            raise WorkdirIntegrityError(f"stored SHA-256 does not match the bytes of {self.path}")
        if pending is not None:
            yield pending

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self])


class Workdir:
    """The per-thread facade over one backend (a folder or an S3 prefix)."""

    def __init__(self, store: WorkdirStore | Path | str) -> None:
        self.store: WorkdirStore = LocalStore(store) if isinstance(store, (str, Path)) else store

    @property
    def description(self) -> str:
        return self.store.description

    @staticmethod
    def thread_key(thread_id: str) -> str:
        """The thread's folder name; unusual thread ids are hashed, never trusted."""
        if not thread_id:
            raise WorkdirPathError("empty thread id")
        return safe_name(str(thread_id))

    def key(self, thread_id: str, relpath: str) -> str:
        return f"{self.thread_key(thread_id)}/{check_relpath(relpath).as_posix()}"

    async def check(self) -> None:
        await self.store.check()

    async def close(self) -> None:
        await self.store.close()

    # --- writing ------------------------------------------------------------------------------
    async def write_tool_result(
        self,
        thread_id: str,
        tool_call_id: str,
        text: str,
        *,
        index: Mapping[str, object] | None = None,
    ) -> OffloadRecord:
        """Atomically store the full text of a tool result; raise ``WorkdirError`` on failure.

        ``index``: extra fields (tool, args, ids...) of the thread's index entry, added after
        the file is stored; a failed add raises too, so the caller shrinks nothing that the
        index cannot find. An original already stored and indexed is not indexed twice.
        """
        # The same text the history and the view hold (the preview's offsets point into it).
        text = storable_text(text)
        record = await self._store_tool_result(thread_id, tool_call_id, text)
        if index is not None:
            entry = {
                "path": record.path,
                "tool_call_id": tool_call_id,
                "sha256": record.sha256,
                "chars": record.chars,
                **index,
            }
            if not record.existed or not any(
                e.get("path") == record.path and e.get("sha256") == record.sha256
                for e in await self.read_index(thread_id)
            ):
                await self.append_index(thread_id, entry)
        return record

    async def append_index(self, thread_id: str, entry: Mapping[str, object]) -> None:
        """Add one entry to the thread's index. The whole index is rewritten atomically (object
        stores cannot append); one thread's writers are serialized by its run/compress lock."""
        line = json.dumps(dict(entry), ensure_ascii=False, sort_keys=True) + "\n"
        try:
            current, _, _ = await self.read_text(thread_id, INDEX_PATH)
        except WorkdirNotFoundError:
            current = ""
        if current and not current.endswith("\n"):
            current += "\n"
        await self.write_text(thread_id, INDEX_PATH, current + line)

    async def read_index(self, thread_id: str) -> list[dict[str, object]]:
        """The thread's index entries, oldest first ([] when nothing was offloaded yet)."""
        try:
            text, _, _ = await self.read_text(thread_id, INDEX_PATH)
        except WorkdirNotFoundError:
            return []
        entries: list[dict[str, object]] = []
        for line in text.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a torn line is not an entry
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                entries.append(entry)
        return entries

    async def _store_tool_result(
        self, thread_id: str, tool_call_id: str, text: str
    ) -> OffloadRecord:
        data = text.encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        relpath = f"{TOOL_RESULTS_DIR}/{safe_name(tool_call_id)}.txt"
        existing = await self._stored_sha(thread_id, relpath)
        if existing is not None and existing != digest:
            # A provider reused the tool-call id: never replace an original a preview names.
            relpath = f"{TOOL_RESULTS_DIR}/{safe_name(tool_call_id)}-{digest[:16]}.txt"
            existing = await self._stored_sha(thread_id, relpath)
        if existing == digest:  # already stored, byte for byte
            record = self._record(thread_id, relpath, text, data, digest, tool_call_id)
            return dataclasses.replace(record, existed=True)
        return await self.write_text(thread_id, relpath, text, tool_call_id=tool_call_id)

    async def write_text(
        self, thread_id: str, relpath: str, text: str, *, tool_call_id: str = ""
    ) -> OffloadRecord:
        """Atomically (re)write any file of the thread folder, its SHA-256 stored with it.

        A lone surrogate (a tool's cut emoji) cannot be encoded as UTF-8: stored as U+FFFD.
        """
        text = storable_text(text)
        data = text.encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        record = self._record(thread_id, relpath, text, data, digest, tool_call_id)
        await self.store.put(record.key, data, digest)
        return record

    def _record(
        self, thread_id: str, relpath: str, text: str, data: bytes, digest: str, call_id: str
    ) -> OffloadRecord:
        return OffloadRecord(
            path=relpath,
            key=self.key(thread_id, relpath),
            sha256=digest,
            chars=len(text),
            bytes=len(data),
            tool_call_id=call_id,
        )

    async def _stored_sha(self, thread_id: str, relpath: str) -> str | None:
        """SHA-256 of an existing object (computed if it was stored without one), else None."""
        try:
            info = await self.store.head(self.key(thread_id, relpath))
        except WorkdirError:
            return None
        if info is None:
            return None
        if info.sha256 is not None:
            return info.sha256
        with contextlib.suppress(WorkdirError):
            return hashlib.sha256(await (await self.open(thread_id, relpath)).read()).hexdigest()
        return None

    # --- reading ------------------------------------------------------------------------------
    async def open(self, thread_id: str, relpath: str) -> WorkdirStream:
        """The file's stored SHA-256 and size, then its bytes (verified while they stream)."""
        key = self.key(thread_id, relpath)
        info, chunks = await self.store.open(key)
        if info.sha256 is None:  # written without a stored hash: hash it before serving
            data = b"".join([c async for c in chunks])
            return WorkdirStream(relpath, hashlib.sha256(data).hexdigest(), len(data), _one(data))
        return WorkdirStream(relpath, info.sha256, info.size, chunks)

    async def read_text(
        self, thread_id: str, relpath: str, offset: int = 0, limit: int | None = None
    ) -> tuple[str, int, str]:
        """Return (text[offset:offset+limit], total_chars, sha256 of the full file)."""
        if offset < 0 or (limit is not None and limit < 0):
            raise WorkdirPathError("offset and limit must be >= 0")
        stream = await self.open(thread_id, relpath)
        text = (await stream.read()).decode("utf-8", errors="replace")
        end = None if limit is None else offset + limit
        return text[offset:end], len(text), stream.sha256

    async def list_files(self, thread_id: str) -> list[str]:
        """Paths (relative to the thread folder) of the thread's files, sorted."""
        prefix = self.thread_key(thread_id) + "/"
        return sorted(o.key[len(prefix) :] for o in await self.store.list_objects(prefix))

    async def delete_thread(self, thread_id: str) -> None:
        await self.store.delete_prefix(self.thread_key(thread_id) + "/")


async def _one(data: bytes) -> AsyncIterator[bytes]:
    yield data


# --- local folder backend -----------------------------------------------------------------------
def _sidecar(path: Path) -> Path:
    """Where the local backend keeps an object's SHA-256 (a hidden name no key can reach)."""
    return path.with_name(f".{path.name}.sha256")


class LocalStore:
    """A folder. The root must already exist (the app creates it at start-up): a missing root
    is a deployment error we report instead of silently creating folders somewhere unexpected.
    Writes are temp file + fsync + ``os.replace``; the hash sidecar is replaced first, so a
    visible object always has its hash beside it."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).absolute()
        self.description = f"file://{self.root}"

    def thread_dir(self, thread_id: str) -> Path:
        return self.root / Workdir.thread_key(thread_id)

    def resolve(self, key: str) -> Path:
        """Absolute path of ``key``; refuse one that escapes its thread folder (symlinks too)."""
        thread, _, rest = key.partition("/")
        base = self.root / thread
        candidate = base.joinpath(*PurePosixPath(rest).parts) if rest else base
        real_base = Path(os.path.realpath(base))
        real = Path(os.path.realpath(candidate))
        if real != real_base and not real.is_relative_to(real_base):
            raise WorkdirPathError(f"path escapes the thread folder: {rest!r}")
        return real

    async def check(self) -> None:
        if not await asyncio.to_thread(self.root.is_dir):
            raise WorkdirError(f"workdir root does not exist or is not a directory: {self.root}")

    async def head(self, key: str) -> StoredObject | None:
        return await asyncio.to_thread(self._head, key)

    def _head(self, key: str) -> StoredObject | None:
        path = self.resolve(key)
        try:
            if not path.is_file():
                return None
            size = path.stat().st_size
        except OSError as exc:
            raise WorkdirError(f"cannot stat {key}: {exc}") from exc
        return StoredObject(key, size, _read_sidecar(path))

    async def put(self, key: str, data: bytes, sha256: str) -> None:
        await asyncio.to_thread(self._put, key, data, sha256)

    def _put(self, key: str, data: bytes, sha256: str) -> None:
        if not self.root.is_dir():
            raise WorkdirError(f"workdir root does not exist or is not a directory: {self.root}")
        thread, _, rest = key.partition("/")
        try:
            (self.root / thread).mkdir(exist_ok=True)
            target = self.resolve(key)
            target.parent.mkdir(parents=True, exist_ok=True)
            _atomic_write(_sidecar(target), sha256.encode("ascii"))
            try:
                _atomic_write(target, data)
            except OSError:
                if not target.is_file():  # no object: no orphan hash either
                    with contextlib.suppress(OSError):
                        _sidecar(target).unlink()
                raise
        except OSError as exc:
            raise WorkdirError(f"cannot write {rest} for thread {thread}: {exc}") from exc

    async def open(self, key: str) -> tuple[StoredObject, AsyncIterator[bytes]]:
        path = self.resolve(key)
        try:
            handle = await asyncio.to_thread(path.open, "rb")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise WorkdirNotFoundError(f"no such workdir file: {key.partition('/')[2]}") from exc
        except OSError as exc:
            raise WorkdirError(f"cannot read {key.partition('/')[2]}: {exc}") from exc
        size = os.fstat(handle.fileno()).st_size
        return StoredObject(key, size, _read_sidecar(path)), _chunks_of(handle)

    async def list_objects(self, prefix: str) -> list[StoredObject]:
        return await asyncio.to_thread(self._list, prefix)

    def _list(self, prefix: str) -> list[StoredObject]:
        base = self.resolve(prefix.rstrip("/"))
        out: list[StoredObject] = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for name in filenames:
                if name.startswith("."):
                    continue
                path = Path(dirpath) / name
                key = path.relative_to(self.root).as_posix()
                out.append(StoredObject(key, path.stat().st_size, _read_sidecar(path)))
        return out

    async def delete_prefix(self, prefix: str) -> None:
        base = self.root / prefix.rstrip("/")
        await asyncio.to_thread(shutil.rmtree, base, ignore_errors=True)

    async def close(self) -> None:
        return None


async def _chunks_of(handle: BinaryIO) -> AsyncIterator[bytes]:
    with handle:
        while chunk := await asyncio.to_thread(handle.read, CHUNK_BYTES):
            yield chunk


def _read_sidecar(path: Path) -> str | None:
    try:
        value = _sidecar(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return value if re.fullmatch(r"[0-9a-f]{64}", value) else None


def _atomic_write(target: Path, data: bytes) -> None:
    tmp_name: str | None = None
    try:
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".part")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
        tmp_name = None
        _fsync_dir(target.parent)
    finally:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)


def _fsync_dir(directory: Path) -> None:
    """Persist the rename itself; not supported everywhere, so best effort."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def open_workdir(settings: Settings) -> Workdir:
    """The deployment's Workdir: ``THREADKEEPER_WORKDIR_URL=s3://bucket/prefix`` or the folder
    ``THREADKEEPER_WORKDIR_ROOT`` (created here)."""
    if settings.workdir_url:
        from app.agents.workdir_s3 import S3Store

        return Workdir(S3Store.from_settings(settings))
    settings.workdir_path.mkdir(parents=True, exist_ok=True)
    return Workdir(LocalStore(settings.workdir_path))
