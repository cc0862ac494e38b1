"""The saver's inserts without a speculative insertion (app/db/checkpointer.py, one statement
per checkpoint and per task's writes: app/db/checkpoint_sql.py): upstream's outcome, including a
re-put of the same checkpoint and a writer racing on the same key."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from app.db.checkpointer import INLINE_DUMP_CHARS, INLINE_DUMP_ITEMS, BoundedPostgresSaver
from app.db.urls import libpq_url
from tests.support.checkpoints import saver_on_pool
from tests.support.executors import CountingExecutor

pytestmark = pytest.mark.integration
THREAD = "t-writes"


@pytest.fixture(params=[False, True], ids=["one-statement", "row-statements"])
async def saver(
    clean_db: str, request: pytest.FixtureRequest
) -> AsyncIterator[BoundedPostgresSaver]:
    """Each test on both write paths: one statement per checkpoint (the service's) and a
    statement per row (``benchmarks/checkpoint_writes.py``'s comparison)."""
    async with saver_on_pool(clean_db) as made:
        made.row_statements = request.param
        yield made


def _config(checkpoint_id: str | None = None) -> Any:
    return {
        "configurable": {"thread_id": THREAD, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}
    }


async def _put(saver: BoundedPostgresSaver, text: str, step: int, version: str) -> str:
    checkpoint: Any = dict(empty_checkpoint())
    checkpoint["id"] = "1ef00000-0000-6000-8000-000000000001"
    checkpoint["channel_values"] = {"messages": [HumanMessage(text, id="h")]}
    checkpoint["channel_versions"] = {"messages": version}
    await saver.aput(_config(), checkpoint, {"step": step}, {"messages": version})  # type: ignore[typeddict-item]
    return str(checkpoint["id"])


async def test_a_put_again_updates_the_checkpoint_and_keeps_the_first_blob(
    saver: BoundedPostgresSaver,
) -> None:
    checkpoint_id = await _put(saver, "first", 1, "a1")
    await _put(saver, "second", 2, "a1")  # same id, same version: row updated, blob kept
    got = await saver.aget_tuple(_config(checkpoint_id))
    assert got is not None
    assert got.metadata["step"] == 2
    assert [m.content for m in got.checkpoint["channel_values"]["messages"]] == ["first"]


async def test_writes_put_twice_are_stored_once(saver: BoundedPostgresSaver, clean_db: str) -> None:
    checkpoint_id = await _put(saver, "q", 1, "a1")
    writes = [("messages", [AIMessage("a", id="a")]), ("other", 1)]
    await saver.aput_writes(_config(checkpoint_id), writes, "task-1")
    await saver.aput_writes(_config(checkpoint_id), writes, "task-1")
    got = await saver.aget_tuple(_config(checkpoint_id))
    assert got is not None
    assert [(t, c) for t, c, _ in got.pending_writes] == [
        ("task-1", "messages"),
        ("task-1", "other"),
    ]
    with psycopg.connect(libpq_url(clean_db)) as conn:
        cur = conn.execute("SELECT count(*) FROM checkpoint_writes WHERE thread_id = %s", (THREAD,))
        assert cur.fetchone() == (2,)


async def test_a_racing_writer_of_the_same_blob_falls_back_to_upstreams_insert(
    saver: BoundedPostgresSaver, clean_db: str
) -> None:
    """Another transaction inserts the same blob key, uncommitted: the saver's NOT EXISTS does
    not see it, its insert waits on the key, then fails on it when that commits; the write is
    redone with ON CONFLICT DO NOTHING and the checkpoint is stored."""
    async with await psycopg.AsyncConnection.connect(libpq_url(clean_db)) as other:
        await other.execute(
            "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob) "
            "VALUES (%s, '', 'messages', 'a1', 'empty', NULL)",
            (THREAD,),
        )
        put = asyncio.create_task(_put(saver, "q", 1, "a1"))
        for _ in range(200):
            await other.execute("SELECT pg_stat_clear_snapshot()")  # read once per transaction
            cur = await other.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND datname = current_database()"
            )
            row = await cur.fetchone()
            if row is not None and row[0] >= 1:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the saver's insert did not wait on the uncommitted key")
        await other.commit()
        checkpoint_id = await asyncio.wait_for(put, 30)
    got = await saver.aget_tuple(_config(checkpoint_id))
    assert got is not None
    assert got.metadata["step"] == 1
    assert "messages" not in got.checkpoint["channel_values"]  # the racer's blob ("empty") won


async def _hops(work: Any) -> int:
    loop = asyncio.get_running_loop()
    executor = CountingExecutor()
    loop.set_default_executor(executor)
    try:
        await work
    finally:
        loop._default_executor = None  # type: ignore[attr-defined]  # the next user makes a new one
        executor.shutdown()
    return executor.submitted


@pytest.mark.parametrize(
    ("messages", "hops"),
    [
        ([HumanMessage("short question", id="h0"), AIMessage("short answer", id="a0")], 0),
        ([HumanMessage(f"m{i}", id=f"h{i}") for i in range(INLINE_DUMP_ITEMS + 1)], 1),
        ([HumanMessage("x" * (INLINE_DUMP_CHARS + 1), id="big")], 1),
    ],
    ids=["small-inline", "many-items-thread", "long-content-thread"],
)
async def test_small_values_are_serialized_on_the_loop_large_ones_in_a_thread(
    saver: BoundedPostgresSaver, messages: list[Any], hops: int
) -> None:
    """A short step's checkpoint and writes skip the thread hop (~50 us of CPU each); a long
    history or a long message still goes to a thread; what is read back is the same."""
    checkpoint: Any = dict(empty_checkpoint())
    checkpoint["id"] = "1ef00000-0000-6000-8000-000000000002"
    checkpoint["channel_values"] = {"messages": messages}
    checkpoint["channel_versions"] = {"messages": "a1"}
    put = saver.aput(_config(), checkpoint, {"step": 1}, {"messages": "a1"})  # type: ignore[typeddict-item]
    assert await _hops(put) == hops
    writes = [("messages", messages[-1:] if hops == 0 else messages)]
    assert await _hops(saver.aput_writes(_config(checkpoint["id"]), writes, "task-1")) == hops
    got = await saver.aget_tuple(_config(checkpoint["id"]))
    assert got is not None
    assert got.checkpoint["channel_values"]["messages"] == messages
    assert [v for _, _, v in got.pending_writes] == [writes[0][1]]


async def test_checkpoints_without_blobs_or_with_only_empty_ones_are_stored(
    saver: BoundedPostgresSaver,
) -> None:
    """No changed blob (inline values only), then only an ``empty`` one (a changed channel with
    no value: an array of one NULL), then both kinds: each checkpoint is stored and read back."""
    config: Any = _config()
    steps = [
        ({"x": 1}, {"x": "a1"}),
        ({}, {"y": "a2"}),
        ({"z": [1, 2]}, {"y": "a3", "z": "a1"}),
    ]
    for step, (values, versions) in enumerate(steps):
        checkpoint: Any = dict(empty_checkpoint())
        checkpoint["id"] = f"1ef00000-0000-6000-8000-00000000001{step}"
        checkpoint["channel_values"] = values
        checkpoint["channel_versions"] = versions
        parent = config["configurable"]["checkpoint_id"]
        config = await saver.aput(config, checkpoint, {"step": step}, versions)
        got = await saver.aget_tuple(config)
        assert got is not None
        assert got.metadata["step"] == step
        assert got.checkpoint["channel_values"] == values
        assert (got.parent_config or {}).get("configurable", {}).get("checkpoint_id") == parent
    await saver.aput_writes(config, [("a", None), ("__error__", "boom")], "task-x")
    got = await saver.aget_tuple(config)
    assert got is not None
    assert sorted(got.pending_writes) == [("task-x", "__error__", "boom"), ("task-x", "a", None)]
