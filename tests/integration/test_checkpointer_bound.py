"""Issue 22 item 5: checkpoint reads and writes wait at most DB_POOL_TIMEOUT_SECONDS, then 503.

The checkpoint library ran every operation of a process behind one lock; while its holder was
stuck (connections being killed, the pool exhausted) every other checkpoint operation used to
wait behind it without bound. On a pool that lock is gone (issue 23: it serialized every
checkpoint read and write of 64 concurrent runs); what a stuck operation holds now is one pooled
connection. Here the test holds every pooled connection, as stuck operations do, and checks the
outcome, not the time: the call returns, with 503, and a run ends ``database_unavailable``
instead of hanging; and one stuck operation no longer stops the others. ``HANG_GUARD`` only
keeps a regression from hanging the suite.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from app.db.session import CHECKPOINTER_APPLICATION_NAME
from app.db.urls import libpq_url
from tests.support.api import add_doc, assert_clean_503, messages, new_thread
from tests.support.app_harness import AUTH, AppFactory, AppHarness

pytestmark = pytest.mark.integration

HANG_GUARD = 30.0
BOUND = {"db_pool_timeout_seconds": 0.5, "db_pool_size": 2, "checkpointer_pool_size": 2}


@contextlib.asynccontextmanager
async def checkpointer_connections_held(h: AppHarness) -> AsyncIterator[None]:
    """Take every connection of the checkpointer's pool, as checkpoint calls stuck on dead
    connections do."""
    pool = h.container.pool
    held = [await pool.getconn() for _ in range(BOUND["checkpointer_pool_size"])]
    try:
        yield
    finally:
        for conn in held:
            await pool.putconn(conn)


async def _guarded(call: Any) -> Any:
    return await asyncio.wait_for(call, HANG_GUARD)


async def _lock_waiter(db: Any) -> None:
    """Until a checkpointer connection waits for a lock."""
    while True:
        # pg_stat_activity is read once per transaction unless its snapshot is cleared.
        await db.execute("SELECT pg_stat_clear_snapshot()")
        row = await (
            await db.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE application_name = %s AND wait_event_type = 'Lock'",
                (CHECKPOINTER_APPLICATION_NAME,),
            )
        ).fetchone()
        if row[0]:
            return
        await asyncio.sleep(0.02)


async def test_state_reads_with_every_checkpointer_connection_stuck_answer_503(
    app_factory: AppFactory,
) -> None:
    async with app_factory(**BOUND) as h:
        await add_doc(h)
        tid = await new_thread(h)
        async with checkpointer_connections_held(h):
            state = await _guarded(h.client.get(f"/v1/threads/{tid}/agent-state", headers=AUTH))
            compress = await _guarded(
                h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
            )
            # Routes that do not touch checkpoints are unaffected meanwhile.
            assert (await h.client.get(f"/v1/threads/{tid}", headers=AUTH)).status_code == 200
        assert_clean_503(state)
        assert_clean_503(compress)
        got = await h.client.get(f"/v1/threads/{tid}/agent-state", headers=AUTH)
        assert got.status_code == 200, got.text


async def test_concurrent_state_reads_on_an_exhausted_checkpointer_pool_all_return(
    app_factory: AppFactory,
) -> None:
    """Every pooled connection taken: each of several concurrent reads (queued on the pool
    behind each other) ends 503; none waits for the others' timeouts to add up forever."""
    async with app_factory(**BOUND) as h:
        tid = await new_thread(h)
        async with checkpointer_connections_held(h):
            answers = await _guarded(
                asyncio.gather(
                    *(
                        h.client.get(f"/v1/threads/{tid}/agent-state", headers=AUTH)
                        for _ in range(4)
                    )
                )
            )
        for resp in answers:
            assert_clean_503(resp)
        got = await h.client.get(f"/v1/threads/{tid}/agent-state", headers=AUTH)
        assert got.status_code == 200, got.text


async def test_a_run_whose_checkpoints_cannot_be_reached_fails_as_a_database_outage(
    app_factory: AppFactory,
) -> None:
    async with app_factory(**BOUND) as h:
        await add_doc(h)
        tid = await new_thread(h)
        async with checkpointer_connections_held(h):
            posted = await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "lease?"}, headers=AUTH
            )
            assert posted.status_code == 202
            run = await h.wait_for_run(tid, statuses={"failed", "completed"}, timeout=HANG_GUARD)
        assert run["status"] == "failed", run
        assert run["error_code"] == "database_unavailable", run

        # The thread is not left broken: the next message runs to an answer.
        again = await h.client.post(
            f"/v1/threads/{tid}/messages", json={"content": "and the heartbeat?"}, headers=AUTH
        )
        assert again.status_code == 202
        done = await h.wait_for_run(
            tid, statuses={"failed", "completed"}, exclude={run["id"]}, timeout=HANG_GUARD
        )
        assert done["status"] == "completed", done
        assert [m["role"] for m in await messages(h, tid)][-1] == "assistant"


async def test_a_stuck_checkpoint_operation_does_not_stop_the_others(
    app_factory: AppFactory,
) -> None:
    """One checkpoint write blocked in the database (a row lock here, a dead connection in
    production) holds one connection, not the whole checkpointer: another thread's state still
    reads (with upstream's process-wide lock it waited behind the stuck one, then 503)."""
    async with app_factory(**BOUND) as h:
        await add_doc(h)
        stuck, other = await new_thread(h), await new_thread(h)
        for tid in (stuck, other):
            posted = await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "kb?"}, headers=AUTH
            )
            assert posted.status_code == 202
            run = await h.wait_for_run(tid, statuses={"completed", "failed"}, timeout=HANG_GUARD)
            assert run["status"] == "completed", run
        saver = h.container.checkpointer
        async with await psycopg.AsyncConnection.connect(libpq_url(h.container.database_url)) as db:
            await db.execute(
                "SELECT 1 FROM checkpoints WHERE thread_id = %s FOR UPDATE", (str(stuck),)
            )
            blocked = asyncio.create_task(saver.adelete_thread(str(stuck)))
            await _guarded(_lock_waiter(db))
            assert not blocked.done()
            state = await _guarded(h.client.get(f"/v1/threads/{other}/agent-state", headers=AUTH))
            assert state.status_code == 200, state.text
            assert state.json()["messages"], state.json()
            await db.rollback()
        await _guarded(blocked)
        assert await saver.aget_tuple({"configurable": {"thread_id": str(stuck)}}) is None
