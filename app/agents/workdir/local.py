"""The local-folder Workdir backend (the default): temp file + fsync + rename per object."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from app.agents.workdir.base import (
    CHUNK_BYTES,
    StoredObject,
    WorkdirError,
    WorkdirNotFoundError,
    WorkdirPathError,
    thread_key,
)


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
