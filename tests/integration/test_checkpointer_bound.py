"""Issue 22 item 5: checkpoint reads and writes wait at most DB_POOL_TIMEOUT_SECONDS, then 503.

The checkpoint library runs every operation of a process behind one lock; while its holder is
stuck (connections being killed, the pool exhausted) every other checkpoint operation used to
wait behind it without bound. Here the test holds that lock itself (and, separately, every pooled
connection) and checks the outcome, not the time: the call returns, with 503, and a run ends
``database_unavailable`` instead of hanging. ``HANG_GUARD`` only keeps a regression from hanging
the suite.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import AUTH, AppFactory, AppHarness
from tests.support.api import add_doc, assert_clean_503, messages, new_thread

pytestmark = pytest.mark.integration

HANG_GUARD = 30.0
BOUND = {"db_pool_timeout_seconds": 0.5, "db_pool_size": 2}


@contextlib.asynccontextmanager
async def saver_lock_held(h: AppHarness) -> AsyncIterator[None]:
    """Hold the checkpointer's process-wide lock, as a checkpoint call stuck on a dead
    connection does."""
    lock = h.container.checkpointer.lock
    await lock.acquire()
    try:
        yield
    finally:
        lock.release()


async def _guarded(call: Any) -> Any:
    return await asyncio.wait_for(call, HANG_GUARD)


async def test_state_reads_behind_a_held_checkpointer_lock_answer_503(
    app_factory: AppFactory,
) -> None:
    async with app_factory(**BOUND) as h:
        await add_doc(h)
        tid = await new_thread(h)
        async with saver_lock_held(h):
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
    """Every pooled connection taken: each of several concurrent reads (queued on the lock
    behind each other) ends 503; none waits for the others' timeouts to add up forever."""
    async with app_factory(**BOUND) as h:
        tid = await new_thread(h)
        pool = h.container.pool
        held = [await pool.getconn() for _ in range(BOUND["db_pool_size"])]
        try:
            answers = await _guarded(
                asyncio.gather(
                    *(
                        h.client.get(f"/v1/threads/{tid}/agent-state", headers=AUTH)
                        for _ in range(4)
                    )
                )
            )
        finally:
            for conn in held:
                await pool.putconn(conn)
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
        async with saver_lock_held(h):
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
