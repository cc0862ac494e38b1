"""Recall without scanning history: the thread's index in PostgreSQL, on both Workdir backends.

A search over a 1000-result thread reads only the originals that match; an offload appends one
index row and writes only its own original (the index is never rewritten); a tampered original
is refused when read; an index row that cannot be written shrinks nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from app.compression.offload import deterministic_pass
from app.compression.recall import index_fields, search_workdir
from app.compression.tokens import TokenCounter
from app.compression.workdir import (
    INDEX_PATH,
    PgIndex,
    PutItem,
    PutOutcome,
    StoredObject,
    Workdir,
    WorkdirIntegrityError,
    WorkdirStore,
    open_workdir,
)
from app.db.session import create_engine, create_session_factory
from tests.conftest import make_settings
from tests.support.workdir_tamper import bucket_of, tamper

pytestmark = pytest.mark.integration

THREAD_RESULTS = 1000
FILLER = "Leases renew on heartbeat and expire after the grace period. "


class CountingStore:
    """A real backend, with the objects it opened and the bytes it was asked to store counted."""

    def __init__(self, inner: WorkdirStore) -> None:
        self.inner = inner
        self.description = inner.description
        self.opened: Counter[str] = Counter()
        self.put_bytes: list[tuple[str, int]] = []

    async def check(self) -> None:
        await self.inner.check()

    async def head(self, key: str) -> StoredObject | None:
        return await self.inner.head(key)

    async def put(self, key: str, data: bytes, sha256: str) -> None:
        self.put_bytes.append((key, len(data)))
        await self.inner.put(key, data, sha256)

    async def put_many(self, items: Sequence[PutItem]) -> list[PutOutcome]:
        self.put_bytes.extend((key, len(data)) for key, data, _ in items)
        return await self.inner.put_many(items)

    async def open(self, key: str) -> tuple[StoredObject, AsyncIterator[bytes]]:
        self.opened[key] += 1
        return await self.inner.open(key)

    async def list_objects(self, prefix: str) -> list[StoredObject]:
        return await self.inner.list_objects(prefix)

    async def delete_prefix(self, prefix: str) -> None:
        await self.inner.delete_prefix(prefix)

    async def close(self) -> None:
        await self.inner.close()


def result_text(i: int) -> str:
    """A knowledge-base-shaped result; a few carry the rotation facts the searches look for."""
    special = {
        901: "Master key rotation policy ZX-7 applies to every vault.",
        137: "The policy says: rotation of keys follows ZX standards.",
        512: "Rotation happens when ZX monitors fire.",
        20: "Billing policy unchanged.",
    }
    content = FILLER * 3 + special.get(i, f"Nothing else in result {i}.")
    body = {"query": f"q{i}", "results": [{"id": f"r-{i}", "title": f"T{i}", "content": content}]}
    return json.dumps(body)


@pytest.fixture
def plain(workdir_settings: dict[str, Any], tmp_path: Path, engine: AsyncEngine) -> Workdir:
    """The deployment's Workdir (local folder or S3) with the PostgreSQL index."""
    settings = make_settings("", tmp_path / "workdir", **workdir_settings)
    return open_workdir(settings.workdir, PgIndex(create_session_factory(engine)))


@pytest.fixture
def counted(plain: Workdir) -> Workdir:
    """The same storage and index, through a store that counts reads and writes."""
    return Workdir(CountingStore(plain.store), plain.index)


async def offload(workdir: Workdir, thread: str, call: str, text: str) -> None:
    args = {"query": call}
    await workdir.write_tool_result(thread, call, text, index=index_fields("query_kb", args, text))


async def seed(workdir: Workdir, thread: str, n: int) -> None:
    for start in range(0, n, 25):  # one thread's writes, a few at a time: seeding stays quick
        await asyncio.gather(
            *(
                offload(workdir, thread, f"c{i}", result_text(i))
                for i in range(start, min(n, start + 25))
            )
        )


async def test_search_over_a_1000_result_thread_reads_only_the_matches(
    counted: Workdir,
) -> None:
    await seed(counted, "t", THREAD_RESULTS)
    await offload(counted, "other", "c901", result_text(901))  # another thread: never searched
    store = counted.store
    assert isinstance(store, CountingStore)
    store.opened.clear()

    hits = await search_workdir(counted, "t", "rotation policy ZX-7", limit=5)

    # Exact phrase first, then most distinct terms within the snippet window.
    assert [h.path for h in hits] == [
        "tool-results/c901.txt",
        "tool-results/c137.txt",
        "tool-results/c512.txt",
        "tool-results/c20.txt",
    ]
    assert hits[0].matched == ["rotation policy ZX-7"]
    assert set(hits[1].matched) == {"rotation", "policy", "zx"}
    assert hits[0].result is not None and hits[0].result["id"] == "r-901"
    # O(matches): each matched original read once, nothing else (no index file, no history).
    assert store.opened == Counter({counted.key("t", h.path): 1 for h in hits})
    for hit in hits:
        text, _, sha = await counted.read_text(
            "t", hit.path, offset=hit.offset, limit=hit.end - hit.offset
        )
        assert text == hit.snippet and sha == hit.sha256

    store.opened.clear()
    assert await search_workdir(counted, "t", "quantum entanglement") == []
    assert store.opened == Counter()
    # The index lists every original once, oldest first, as index.jsonl shows it.
    assert await counted.index_size("t") == THREAD_RESULTS


async def test_each_offload_appends_one_row_and_writes_only_its_original(
    counted: Workdir, engine: AsyncEngine
) -> None:
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "workdir_index" in statement:
            statements.append(statement.split()[0].upper())

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    store = counted.store
    assert isinstance(store, CountingStore)
    per_entry: list[tuple[list[str], list[tuple[str, int]]]] = []
    try:
        for i in range(120):
            statements.clear()
            store.put_bytes.clear()
            text = result_text(i)
            await offload(counted, "t", f"c{i}", text)
            per_entry.append((list(statements), list(store.put_bytes)))
            if i % 40 == 39:  # a search now and then does not turn appends into rewrites
                await search_workdir(counted, "t", "heartbeat")
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)
    for i, (sql, puts) in enumerate(per_entry):
        # One INSERT into the index; the only object stored is the original itself.
        assert sql == ["INSERT"], (i, sql)
        assert puts == [(counted.key("t", f"tool-results/c{i}.txt"), len(result_text(i)))]
    # Writing an original again appends nothing new (ON CONFLICT DO NOTHING).
    await offload(counted, "t", "c7", result_text(7))
    assert await counted.index_size("t") == 120


async def test_a_tampered_original_is_refused_when_read_not_served(
    plain: Workdir, workdir_settings: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    await seed(plain, "t", 30)
    await offload(plain, "t", "c901", result_text(901))
    await offload(plain, "t", "c137", result_text(137))
    s3 = request.getfixturevalue("s3_server") if workdir_settings else None
    record = await plain.write_tool_result("t", "c901", result_text(901))
    tamper(plain, record, s3, bucket_of(workdir_settings))

    hits = await search_workdir(plain, "t", "rotation policy ZX-7")
    assert [h.path for h in hits] == ["tool-results/c137.txt", "tool-results/c20.txt"]
    assert all("tampered" not in h.snippet for h in hits)
    with pytest.raises(WorkdirIntegrityError):
        await plain.read_text("t", record.path)


async def test_index_row_that_cannot_be_written_shrinks_nothing_and_a_retry_repairs(
    plain: Workdir,
) -> None:
    dead = create_engine("postgresql://postgres@127.0.0.1:1/none")  # nothing listens there
    broken = Workdir(plain.store, PgIndex(create_session_factory(dead)))
    text = result_text(901) * 4
    messages: list[BaseMessage] = [
        AIMessage("", tool_calls=[{"name": "query_kb", "args": {"query": "k"}, "id": "c9"}]),
        ToolMessage(text, tool_call_id="c9", name="query_kb", id="m9"),
    ]
    failures: list[str] = []
    try:
        view, offloaded = await deterministic_pass(
            messages,
            thread_id="t",
            workdir=broken,
            counter=TokenCounter(),
            preview_tokens=50,
            failures=failures,
        )
    finally:
        await dead.dispose()
    assert offloaded == [] and view == messages  # verbatim: nothing shrunk
    assert failures == ["workdir index unavailable"]
    assert await plain.read_index("t") == []

    # The next pass (a retry) finds the stored original and appends its entry: repaired.
    view, offloaded = await deterministic_pass(
        messages, thread_id="t", workdir=plain, counter=TokenCounter(), preview_tokens=50
    )
    assert [r.path for r in offloaded] == ["tool-results/c9.txt"] and view[1] != messages[1]
    assert [e["path"] for e in await plain.read_index("t")] == ["tool-results/c9.txt"]
    hits = await search_workdir(plain, "t", "rotation policy ZX-7")
    assert [h.path for h in hits] == ["tool-results/c9.txt"]


async def test_index_jsonl_is_rendered_and_a_legacy_one_is_imported(plain: Workdir) -> None:
    await offload(plain, "t", "c1", result_text(1))
    listing, _, _ = await plain.read_text("t", INDEX_PATH)
    assert [json.loads(line)["path"] for line in listing.splitlines()] == ["tool-results/c1.txt"]
    assert await plain.list_files("t") == [INDEX_PATH, "tool-results/c1.txt"]

    # A thread offloaded before the index moved to the database: its files and index.jsonl.
    old = await plain.write_tool_result("old", "c5", result_text(901))
    legacy = {"path": old.path, "tool": "query_kb", "sha256": old.sha256, "chars": old.chars}
    data = (json.dumps(legacy) + "\n{torn").encode()
    await plain.store.put(plain.key("old", INDEX_PATH), data, hashlib.sha256(data).hexdigest())
    assert await search_workdir(plain, "old", "rotation policy ZX-7") == []
    assert await plain.import_legacy_index("old") == 1
    assert await plain.import_legacy_index("old") == 1  # idempotent
    assert [h.path for h in await search_workdir(plain, "old", "rotation policy ZX-7")] == [
        old.path
    ]
    assert await plain.index_size("old") == 1

    await plain.delete_thread("t")
    assert await plain.read_index("t") == [] and await plain.list_files("t") == []
