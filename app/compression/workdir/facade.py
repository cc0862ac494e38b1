"""The per-thread Workdir facade every caller uses (async), over one backend.

Semantics, identical on every backend: a put is atomic (a reader never sees half an object), the
SHA-256 is stored with the object and verified on every read (a mismatch is an error, never
served as the original), and every key is confined to the thread's own folder. The thread's
index of offloaded originals lives beside the store (``index.py``: PostgreSQL in a deployment),
appended once per original; ``index.jsonl`` is its rendering, not a stored object. A batch of
originals (``write_tool_results``) is one ``put_many`` and one index transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.compression.retrieval import searchable_text
from app.compression.storable import storable_text, storable_value
from app.compression.terms import terms
from app.compression.workdir.base import (
    INDEX_PATH,
    TOOL_RESULTS_DIR,
    OffloadRecord,
    PutItem,
    ToolResultText,
    WorkdirError,
    WorkdirIntegrityError,
    WorkdirNotFoundError,
    WorkdirPathError,
    WorkdirStore,
    check_relpath,
    safe_name,
)
from app.compression.workdir.base import thread_key as _thread_key
from app.compression.workdir.index import IndexItem, MemoryIndex, WorkdirIndex
from app.compression.workdir.local import LocalStore


def _index_item(path: str, sha256: str, entry: Mapping[str, object], text: str) -> IndexItem:
    """One index row of an original: its entry and the terms it is found by (of a result
    list, not the query it echoes), as storable as the original itself. A result list's JSON
    may escape NUL or half an emoji (``\\u0000``); parsed for ids, titles and terms they
    become text PostgreSQL refuses, and one such row used to fail the whole batch."""
    found = {storable_text(t) for t in terms(searchable_text(text))}
    return path, sha256, storable_value(dict(entry)), {t for t in found if t}


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

    def __init__(self, store: WorkdirStore | Path | str, index: WorkdirIndex | None = None) -> None:
        self.store: WorkdirStore = LocalStore(store) if isinstance(store, (str, Path)) else store
        #: The thread's recall index; without one (no database), a process-local one.
        self.index: WorkdirIndex = (
            index if index is not None else MemoryIndex.for_store(self.store.description)
        )

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

        ``index``: extra fields (tool, args, ids...) of the thread's index entry, appended after
        the file is stored (one entry per path, however often the original is written); a
        failed append raises ``WorkdirIndexError``, so the caller shrinks nothing the index
        cannot find. A retry repairs it: the stored file is kept, the entry appended then.
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
            await self.index.add(
                self.thread_key(thread_id), *_index_item(record.path, record.sha256, entry, text)
            )
        return record

    async def write_tool_results(
        self, thread_id: str, results: Sequence[ToolResultText]
    ) -> list[OffloadRecord | WorkdirError | WorkdirPathError]:
        """``write_tool_result`` for a batch: one outcome per result, in order, each a record
        (its original durably stored and, when it has ``index`` fields, indexed) or the error
        that kept it from being one. One ``put_many`` for the originals not yet stored, then
        one index transaction for the stored ones.

        Per result, a failed write fails only that result. The index transaction is all or
        nothing: when it fails, every result with index fields fails with
        ``WorkdirIndexError`` (their stored files are kept; a retry indexes them)."""
        thread = self.thread_key(thread_id)
        planned = await self._plan_batch(thread_id, results)
        writes: dict[str, PutItem] = {}
        for record, data, _ in planned:
            if not record.existed:
                writes.setdefault(record.key, (record.key, data, record.sha256))
        stored = dict(zip(writes, await self.store.put_many(list(writes.values())), strict=True))
        outcomes: list[OffloadRecord | WorkdirError | WorkdirPathError] = []
        rows: dict[str, IndexItem] = {}  # one entry per path, the first result's (as ``add``)
        indexed: list[int] = []
        for i, (result, (record, _, text)) in enumerate(zip(results, planned, strict=True)):
            error = stored.get(record.key)
            outcomes.append(error or record)
            if error is None and result.index is not None:
                entry = {
                    "path": record.path,
                    "tool_call_id": result.tool_call_id,
                    "sha256": record.sha256,
                    "chars": record.chars,
                    **result.index,
                }
                if record.path not in rows:
                    rows[record.path] = _index_item(record.path, record.sha256, entry, text)
                indexed.append(i)
        if rows:
            try:
                await self.index.add_many(thread, list(rows.values()))
            except WorkdirError as exc:
                for i in indexed:
                    outcomes[i] = exc
        return outcomes

    async def _plan_batch(
        self, thread_id: str, results: Sequence[ToolResultText]
    ) -> list[tuple[OffloadRecord, bytes, str]]:
        """(record, bytes, stored text) of each result: where it goes and whether it is stored already, as ``_store_tool_result``
        decides it (one ``head`` per name, concurrently); a name a result of this batch takes
        is held by it for the results after it."""
        texts = [storable_text(r.text) for r in results]
        plain = [tool_result_path(r.tool_call_id) for r in results]
        names = list(dict.fromkeys(plain))
        found = await asyncio.gather(*(self._stored_sha(thread_id, n) for n in names))
        held = dict(zip(names, found, strict=True))
        before = dict(held)  # what was stored before this batch
        planned: list[tuple[OffloadRecord, bytes, str]] = []
        for result, text, relpath in zip(results, texts, plain, strict=True):
            data = text.encode("utf-8")
            digest = hashlib.sha256(data).hexdigest()
            if held[relpath] is not None and held[relpath] != digest:
                # A provider reused the tool-call id: never replace an original a preview names.
                relpath = f"{TOOL_RESULTS_DIR}/{safe_name(result.tool_call_id)}-{digest[:16]}.txt"
                if relpath not in held:
                    held[relpath] = before[relpath] = await self._stored_sha(thread_id, relpath)
            record = self._record(thread_id, relpath, text, data, digest, result.tool_call_id)
            if before[relpath] == digest:  # already stored, byte for byte
                record = dataclasses.replace(record, existed=True)
            held[relpath] = digest
            planned.append((record, data, text))
        return planned

    def expected_record(self, thread_id: str, tool_call_id: str, text: str) -> OffloadRecord:
        """The record ``write_tool_result(s)`` returns for ``text`` unless another original
        already holds the tool-call id's name (no I/O: a preview can be sized before writing)."""
        text = storable_text(text)
        data = text.encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        relpath = tool_result_path(tool_call_id)
        return self._record(thread_id, relpath, text, data, digest, tool_call_id)

    async def read_index(self, thread_id: str) -> list[dict[str, object]]:
        """The thread's index entries, oldest first ([] when nothing was offloaded yet)."""
        return list(await self.index.entries(self.thread_key(thread_id)))

    async def index_size(self, thread_id: str) -> int:
        """How many originals the thread's index lists (a count, no listing read)."""
        return await self.index.count(self.thread_key(thread_id))

    async def candidates(
        self, thread_id: str, words: Sequence[str], limit: int
    ) -> list[tuple[dict[str, object], int]]:
        """Index entries of the originals holding most of ``words`` (no file is read)."""
        found = await self.index.candidates(self.thread_key(thread_id), words, limit)
        return [(dict(entry), held) for entry, held in found]

    async def import_legacy_index(self, thread_id: str) -> int:
        """Index the originals a stored ``index.jsonl`` (written before the index moved to
        the database) lists; each original is read (and verified) once. Returns how many
        entries it listed; entries already indexed, or whose original is unreadable, are
        skipped. Idempotent."""
        try:
            info, chunks = await self.store.open(self.key(thread_id, INDEX_PATH))
        except WorkdirNotFoundError:
            return 0
        if info.sha256 is None:
            data = b"".join([c async for c in chunks])
        else:  # verified like any other stored file
            data = await WorkdirStream(INDEX_PATH, info.sha256, info.size, chunks).read()
        raw = data.decode("utf-8", errors="replace")
        listed = 0
        for line in raw.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a torn line is not an entry
            if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
                continue
            listed += 1
            try:
                text, _, sha = await self.read_text(thread_id, entry["path"])
            except (WorkdirError, WorkdirPathError):
                continue
            await self.index.add(
                self.thread_key(thread_id),
                *_index_item(entry["path"], sha, {**entry, "sha256": sha}, text),
            )
        return listed

    async def _store_tool_result(
        self, thread_id: str, tool_call_id: str, text: str
    ) -> OffloadRecord:
        data = text.encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        relpath = tool_result_path(tool_call_id)
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
        """The file's stored SHA-256 and size, then its bytes (verified while they stream).

        ``index.jsonl`` is the thread's index as JSON lines, rendered from the index."""
        key = self.key(thread_id, relpath)
        if check_relpath(relpath).as_posix() == INDEX_PATH:
            return await self._index_file(thread_id)
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

    async def _index_file(self, thread_id: str) -> WorkdirStream:
        entries = await self.read_index(thread_id)
        if not entries:
            raise WorkdirNotFoundError(f"no such workdir file: {INDEX_PATH}")
        data = "".join(
            json.dumps(e, ensure_ascii=False, sort_keys=True) + "\n" for e in entries
        ).encode("utf-8")
        return WorkdirStream(INDEX_PATH, hashlib.sha256(data).hexdigest(), len(data), _one(data))

    async def list_files(self, thread_id: str) -> list[str]:
        """Paths (relative to the thread folder) of the thread's files, sorted."""
        prefix = self.thread_key(thread_id) + "/"
        paths = {o.key[len(prefix) :] for o in await self.store.list_objects(prefix)}
        if await self.index_size(thread_id):
            paths.add(INDEX_PATH)
        return sorted(paths)

    async def delete_thread(self, thread_id: str) -> None:
        await self.store.delete_prefix(self.thread_key(thread_id) + "/")
        await self.index.delete_thread(self.thread_key(thread_id))


def tool_result_path(tool_call_id: str) -> str:
    """Where a tool result's original goes, relative to the thread folder."""
    return f"{TOOL_RESULTS_DIR}/{safe_name(tool_call_id)}.txt"


async def _one(data: bytes) -> AsyncIterator[bytes]:
    yield data
