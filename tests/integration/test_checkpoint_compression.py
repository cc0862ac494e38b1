"""Compressed checkpoint blobs (app/db/checkpoint_codec.py) against PostgreSQL: stored marked
``+z1`` and read back exactly; rows an earlier version wrote (uncompressed, long versions) still
read, and a thread continues on top of them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg_pool import AsyncConnectionPool

from app.db.checkpointer import BoundedPostgresSaver
from app.db.urls import libpq_url
from tests.support.checkpoints import saver_on_pool

pytestmark = pytest.mark.integration
THREAD = "t-compressed"
VIEW = [
    HumanMessage("how long is a lease? " * 20, id="h1"),
    AIMessage(
        "",
        id="a1",
        tool_calls=[
            {"name": "query_kb", "args": {"query": "lease"}, "id": "c1", "type": "tool_call"}
        ],
    ),
    ToolMessage('{"results": []}', tool_call_id="c1", name="query_kb", id="t1"),
    AIMessage("A lease lasts 30 seconds.", id="a2"),
]


@pytest.fixture
async def pool(clean_db: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with saver_on_pool(clean_db) as saver:
        yield saver.conn


def _config(checkpoint_id: str | None = None) -> Any:
    return {
        "configurable": {"thread_id": THREAD, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}
    }


async def _put(saver: AsyncPostgresSaver, n: int, parent: str | None, view: list[Any]) -> str:
    checkpoint: Any = dict(empty_checkpoint())
    checkpoint["id"] = f"1ef00000-0000-6000-8000-{n:012}"
    previous = None
    if parent is not None:
        got = await saver.aget_tuple(_config(parent))
        assert got is not None
        previous = got.checkpoint["channel_versions"]["messages"]
    version = saver.get_next_version(previous, None)
    checkpoint["channel_values"] = {"messages": view}
    checkpoint["channel_versions"] = {"messages": version}
    await saver.aput(_config(parent), checkpoint, {"step": n}, {"messages": version})  # type: ignore[typeddict-item]
    return str(checkpoint["id"])


def _types(url: str, table: str) -> list[str]:
    with psycopg.connect(libpq_url(url)) as conn:
        rows = conn.execute(f"SELECT type FROM {table} WHERE thread_id = %s", (THREAD,)).fetchall()
    return [r[0] for r in rows]


async def test_blobs_and_writes_are_stored_compressed_and_read_back_exactly(
    pool: AsyncConnectionPool[Any], clean_db: str
) -> None:
    saver = BoundedPostgresSaver(pool, acquire_timeout=5)
    first = await _put(saver, 1, None, VIEW[:2])
    second = await _put(saver, 2, first, VIEW)  # a delta on the first
    await saver.aput_writes(
        _config(second), [("messages", [AIMessage("pending " * 10, id="p")])], "task"
    )
    blob_types = _types(clean_db, "checkpoint_blobs")
    assert sorted(blob_types) == ["delta|msgpack+z1|2|a1", "msgpack+z1"]
    assert _types(clean_db, "checkpoint_writes") == ["msgpack+z1"]
    got = await BoundedPostgresSaver(pool, acquire_timeout=5).aget_tuple(_config(second))
    assert got is not None
    assert got.checkpoint["channel_values"]["messages"] == VIEW
    assert got.checkpoint["channel_versions"]["messages"] == "a2"
    assert [(t, c, v[0].content) for t, c, v in got.pending_writes] == [
        ("task", "messages", "pending " * 10)
    ]
    with psycopg.connect(libpq_url(clean_db)) as conn:
        stored = conn.execute(
            "SELECT sum(length(blob)) FROM checkpoint_blobs WHERE thread_id = %s", (THREAD,)
        ).fetchone()
    plain = sum(len(saver.serde.serde.dumps_typed(v)[1]) for v in (VIEW[:2], VIEW[2:]))  # type: ignore[attr-defined]
    assert stored is not None and stored[0] < plain / 2


async def test_rows_an_earlier_version_wrote_still_read_and_the_thread_continues(
    pool: AsyncConnectionPool[Any], clean_db: str
) -> None:
    upstream = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
    first = await _put(upstream, 1, None, VIEW[:2])
    await upstream.aput_writes(_config(first), [("messages", [VIEW[2]])], "old-task")
    assert _types(clean_db, "checkpoint_blobs") == ["msgpack"]
    saver = BoundedPostgresSaver(pool, acquire_timeout=5)
    old = await saver.aget_tuple(_config(first))
    assert old is not None
    assert old.checkpoint["channel_values"]["messages"] == VIEW[:2]
    assert [w[2] for w in old.pending_writes] == [[VIEW[2]]]
    second = await _put(saver, 2, first, VIEW)
    got = await saver.aget_tuple(_config(second))
    assert got is not None
    assert got.checkpoint["channel_values"]["messages"] == VIEW
    new_version = got.checkpoint["channel_versions"]["messages"]
    assert new_version > old.checkpoint["channel_versions"]["messages"]
    assert sorted(_types(clean_db, "checkpoint_blobs")) == ["msgpack", "msgpack+z1"]
