"""Delta-stored messages (app/db/checkpoint_delta.py) against PostgreSQL: the write boundary.

A checkpoint's blobs and row go in one pipeline (one implicit transaction). When that write
breaks (its connection killed mid-write), nothing of it is stored and the saver does not take
it as a base: a later checkpoint on top of it (LangGraph's async durability can send one before
the failure surfaces) is written whole, and every stored checkpoint reads back exactly.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from app.db.checkpoint_delta import DELTA_PREFIX
from app.db.checkpointer import BoundedPostgresSaver
from app.db.urls import libpq_url
from tests.support.checkpoints import saver_on_pool

pytestmark = pytest.mark.integration
THREAD = "t-delta"


@pytest.fixture
async def saver(clean_db: str) -> AsyncIterator[BoundedPostgresSaver]:
    async with saver_on_pool(clean_db) as made:
        yield made


def _checkpoint(n: int, messages: list[Any]) -> dict[str, Any]:
    checkpoint: dict[str, Any] = dict(empty_checkpoint())
    checkpoint["id"] = f"1ef00000-0000-6000-8000-{n:012}"
    checkpoint["channel_values"] = {"messages": messages}
    checkpoint["channel_versions"] = {"messages": f"{n:032}.0.5"}
    return checkpoint


async def _put(saver: BoundedPostgresSaver, n: int, parent: str | None, view: list[Any]) -> str:
    checkpoint = _checkpoint(n, view)
    config = {"configurable": {"thread_id": THREAD, "checkpoint_ns": "", "checkpoint_id": parent}}
    await saver.aput(
        config,  # type: ignore[arg-type]
        checkpoint,  # type: ignore[arg-type]
        {"source": "loop", "step": n},  # type: ignore[typeddict-item]
        {"messages": checkpoint["channel_versions"]["messages"]},
    )
    return str(checkpoint["id"])


async def _read(saver: BoundedPostgresSaver, checkpoint_id: str) -> list[Any]:
    got = await saver.aget_tuple(
        {"configurable": {"thread_id": THREAD, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}}
    )
    assert got is not None
    return list(got.checkpoint["channel_values"]["messages"])


async def _types(saver: BoundedPostgresSaver) -> list[str]:
    async with saver.conn.connection() as conn:  # type: ignore[union-attr]
        rows = await (
            await conn.execute(
                "SELECT type FROM checkpoint_blobs WHERE thread_id = %s ORDER BY version",
                (THREAD,),
            )
        ).fetchall()
    return [r["type"] for r in rows]


async def test_a_broken_write_is_not_a_base(saver: BoundedPostgresSaver, clean_db: str) -> None:
    view1 = [HumanMessage("q", id="h")]
    c1 = await _put(saver, 1, None, view1)
    view2 = [*view1, AIMessage("a", id="a")]
    c2 = await _put(saver, 2, c1, view2)
    assert (await _types(saver))[1].startswith(DELTA_PREFIX)

    view3 = [*view2, AIMessage("tool", id="t")]
    async with await psycopg.AsyncConnection.connect(libpq_url(clean_db)) as blocker:
        await blocker.execute("LOCK TABLE checkpoint_blobs IN SHARE MODE")
        writing = asyncio.create_task(_put(saver, 3, c2, view3))
        for _ in range(1500):  # a hang guard, not a timing assertion
            # pg_stat_activity is read once per transaction unless its snapshot is cleared.
            await blocker.execute("SELECT pg_stat_clear_snapshot()")
            row = await (
                await blocker.execute(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE '%%INSERT INTO checkpoint_blobs%%'"
                )
            ).fetchone()
            if row:
                break
            await asyncio.sleep(0.02)
        assert row, "the write never waited for the lock"
        await blocker.execute("SELECT pg_terminate_backend(%s)", (row[0],))
        with pytest.raises(psycopg.OperationalError):
            await asyncio.wait_for(writing, 30)
        await blocker.rollback()
    assert len(await _types(saver)) == 2  # nothing of checkpoint 3 was stored

    # On top of the checkpoint whose write broke: written whole, and it reads back exactly.
    view4 = [*view3, AIMessage("final", id="f")]
    c4 = await _put(saver, 4, "1ef00000-0000-6000-8000-000000000003", view4)
    assert not (await _types(saver))[-1].startswith(DELTA_PREFIX)
    assert await _read(saver, c4) == view4
    assert await _read(saver, c2) == view2

    # A successful write is a base again.
    view5 = [*view4, HumanMessage("next", id="n")]
    c5 = await _put(saver, 5, c4, view5)
    assert (await _types(saver))[-1].startswith(DELTA_PREFIX)
    assert await _read(saver, c5) == view5


async def test_a_delta_chain_survives_the_prune_and_a_new_process(
    saver: BoundedPostgresSaver,
) -> None:
    view = [HumanMessage("q0", id="h0")]
    parent = await _put(saver, 1, None, view)
    for n in range(2, 8):
        view = [*view, AIMessage(f"a{n}", id=f"a{n}")]
        parent = await _put(saver, n, parent, view)
    await saver.aprune([THREAD])
    assert await _read(saver, parent) == view
    # Another process (no lineage) writes on top: whole, and both read back.
    other = BoundedPostgresSaver(saver.conn, acquire_timeout=5)
    view = [*view, AIMessage("elsewhere", id="e")]
    head = await _put(other, 8, parent, view)
    assert not (await _types(saver))[-1].startswith(DELTA_PREFIX)
    assert await _read(saver, head) == view
    await saver.adelete_thread(THREAD)
    assert await _types(saver) == []
