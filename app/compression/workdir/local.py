"""The local-folder Workdir backend (the default): temp file + fsync + rename per object.

A batch (``put_many``) shares the folder fsyncs: every object and hash sidecar is written to a
temp file and fsynced, then all are renamed into place, then each folder whose entries changed
is fsynced once, instead of after every rename.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from app.compression.workdir.base import (
    CHUNK_BYTES,
    PutItem,
    PutOutcome,
    StoredObject,
    WorkdirError,
    WorkdirNotFoundError,
    WorkdirPathError,
    thread_key,
)

#: Threads writing and fsyncing one batch's temp files.
STAGE_WORKERS = 8


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
        return self.root / thread_key(thread_id)

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

    async def put_many(self, items: Sequence[PutItem]) -> list[PutOutcome]:
        # One thread hop for the whole batch.
        return await asyncio.to_thread(self._put_many, list(items)) if items else []

    def _put_many(self, items: list[PutItem]) -> list[PutOutcome]:
        """Each object as ``_put`` stores it, but each changed folder fsynced once per batch.

        Safe because nothing depends on a rename before this returns (the caller indexes an
        original only afterwards), and a crash before the folder fsync loses renames, never
        bytes: each temp file was fsynced before it got its name. An item that fails (its
        folder blocked, a full disk, a directory where its name goes) leaves no file and no
        temp behind; the others are stored all the same."""
        if not self.root.is_dir():
            missing = WorkdirError(
                f"workdir root does not exist or is not a directory: {self.root}"
            )
            return [missing for _ in items]
        outcomes: list[PutOutcome] = [None] * len(items)
        changed: set[Path] = set()  # folders whose entries changed: fsynced once each
        staged: list[_Staged] = []
        for i, (key, _, _) in enumerate(items):
            try:
                staged.append(_Staged(i, key, self._make_parents(key, changed)))
            except (OSError, WorkdirPathError) as exc:
                outcomes[i] = _failed(key, exc)
        errors = _stage_all(staged, items)
        for entry, error in zip(staged, errors, strict=True):
            if error is not None:
                outcomes[entry.index] = _failed(entry.key, error)
        staged = [e for e, error in zip(staged, errors, strict=True) if error is None]
        for entry in staged:  # hash sidecar first: a visible object has its hash beside it
            target = entry.target
            try:
                os.replace(entry.sidecar_tmp, _sidecar(target))
                entry.sidecar_tmp = ""
                os.replace(entry.data_tmp, target)
                entry.data_tmp = ""
                changed.add(target.parent)
            except OSError as exc:
                outcomes[entry.index] = _failed(entry.key, exc)
                entry.discard()
                if not target.is_file():  # no object: no orphan hash either
                    with contextlib.suppress(OSError):
                        _sidecar(target).unlink()
        for directory in changed:
            _fsync_dir(directory)
        return outcomes

    def _make_parents(self, key: str, changed: set[Path]) -> Path:
        """The object's path, its folders created (a created folder's parent is ``changed``)."""
        thread = key.partition("/")[0]
        _make_dir(self.root / thread, changed)
        target = self.resolve(key)
        base = Path(os.path.realpath(self.root / thread))
        for folder in reversed(target.parent.relative_to(base).parents[:-1]):
            _make_dir(base / folder, changed)
        _make_dir(target.parent, changed)
        return target

    async def open(self, key: str) -> tuple[StoredObject, AsyncIterator[bytes]]:
        # One thread hop for the path checks, the open, the hash sidecar and, for an object
        # of one chunk (an offloaded original usually is), its bytes: a search reads several.
        info, handle, small = await asyncio.to_thread(self._open, key)
        if handle is None:
            return info, _bytes_of(small)
        return info, _chunks_of(handle)

    def _open(self, key: str) -> tuple[StoredObject, BinaryIO | None, bytes]:
        """(metadata, the open file or None, the whole body when it fits in one chunk)."""
        path = self.resolve(key)
        try:
            handle = path.open("rb")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise WorkdirNotFoundError(f"no such workdir file: {key.partition('/')[2]}") from exc
        except OSError as exc:
            raise WorkdirError(f"cannot read {key.partition('/')[2]}: {exc}") from exc
        try:
            size = os.fstat(handle.fileno()).st_size
            info = StoredObject(key, size, _read_sidecar(path))
            if size > CHUNK_BYTES:
                return info, handle, b""
            with handle:
                return info, None, handle.read()
        except BaseException:
            handle.close()
            raise

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


async def _bytes_of(data: bytes) -> AsyncIterator[bytes]:
    if data:
        yield data


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


@dataclass(slots=True)
class _Staged:
    """One item of a batch between its temp files and its renames."""

    index: int
    key: str
    target: Path
    sidecar_tmp: str = ""
    data_tmp: str = ""

    def stage(self, data: bytes, sha256: str) -> OSError | None:
        """Both temp files written and fsynced (the error instead, nothing left behind)."""
        try:
            self.sidecar_tmp = _write_temp(self.target.parent, sha256.encode("ascii"))
            self.data_tmp = _write_temp(self.target.parent, data)
        except OSError as exc:
            self.discard()
            return exc
        return None

    def discard(self) -> None:
        for name in (self.sidecar_tmp, self.data_tmp):
            if name:
                with contextlib.suppress(OSError):
                    os.unlink(name)
        self.sidecar_tmp = self.data_tmp = ""


def _stage_all(staged: list[_Staged], items: list[PutItem]) -> list[OSError | None]:
    """Every item's temp files written and fsynced; per item, the error or None.

    From up to ``STAGE_WORKERS`` threads: concurrent fsyncs share the journal's commits (ext4,
    xfs), so the batch waits for the disk about as long as a few files do, not once per file.
    """

    def stage(entry: _Staged) -> OSError | None:
        return entry.stage(*items[entry.index][1:])

    if len(staged) <= 1:  # no pool for a lone object
        return [stage(entry) for entry in staged]
    with ThreadPoolExecutor(min(STAGE_WORKERS, len(staged)), "workdir-put") as pool:
        return list(pool.map(stage, staged))


def _failed(key: str, exc: BaseException) -> WorkdirError | WorkdirPathError:
    if isinstance(exc, WorkdirPathError):
        return exc
    thread, _, rest = key.partition("/")
    error = WorkdirError(f"cannot write {rest} for thread {thread}: {exc}")
    error.__cause__ = exc
    return error


def _make_dir(path: Path, changed: set[Path]) -> None:
    try:
        path.mkdir()
    except FileExistsError:
        if not path.is_dir():
            raise
        return
    changed.add(path.parent)


def _write_temp(directory: Path, data: bytes) -> str:
    """A fsynced temp file in ``directory`` holding ``data``; its name (removed on failure)."""
    fd, name = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
    return name


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
