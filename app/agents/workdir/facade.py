"""The per-thread Workdir facade every caller uses (async), over one backend.

Semantics, identical on every backend: a put is atomic (a reader never sees half an object), the
SHA-256 is stored with the object and verified on every read (a mismatch is an error, never
served as the original), and every key is confined to the thread's own folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from app.agents.storable import storable_text
from app.agents.workdir.base import (
    INDEX_PATH,
    TOOL_RESULTS_DIR,
    OffloadRecord,
    WorkdirError,
    WorkdirIntegrityError,
    WorkdirNotFoundError,
    WorkdirPathError,
    WorkdirStore,
    check_relpath,
    safe_name,
)
from app.agents.workdir.base import thread_key as _thread_key
from app.agents.workdir.local import LocalStore


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
        return _thread_key(thread_id)

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
