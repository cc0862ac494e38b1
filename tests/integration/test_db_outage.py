"""Lost database connections (issue 10, item 1), against real PostgreSQL and real sockets.

Two faults: every backend of the service killed with ``pg_terminate_backend`` (the pools hold
dead connections afterwards), and the database unreachable for a while (a real TCP proxy between
the service and PostgreSQL is closed, then reopened). The promises: the next request after a drop
succeeds, a request that cannot reach the database gets 503 ``database_unavailable`` (never 500),
and a run caught by an outage goes on from its last checkpoint once the database answers.
"""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

from app.db.urls import libpq_url
from tests.support.api import assert_clean_503, messages, new_thread, run_turns, seed_kb, state
from tests.support.app_harness import AUTH, AppFactory, AppHarness
from tests.support.corpus import BIG
from tests.support.openai_server import OpenAICompatibleServer
from tests.support.tcp_proxy import PostgresProxy, postgres_proxy

pytestmark = pytest.mark.integration

#: Guard so a broken retry fails the test instead of hanging the suite (not a timing assertion).
HANG_GUARD = 60.0


def _service_backends(url: str) -> dict[int, str]:
    """pid -> application_name of every backend of the service on the test database."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid, application_name FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND application_name LIKE 'threadkeeper%'"
        ).fetchall()
    return {int(r[0]): str(r[1]) for r in rows}


def _terminate_all(url: str, pids: list[int]) -> None:
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        for pid in pids:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


async def test_every_pool_survives_terminated_backends(
    app_factory: AppFactory, clean_db: str
) -> None:
    async with app_factory(**BIG) as h:
        await seed_kb(h)
        tid = await new_thread(h)
        await run_turns(h, tid, ["how does a lease expire?", "what renews the heartbeat?"])
        await state(h, tid)  # the checkpointer pool has served this thread

        backends = await asyncio.to_thread(_service_backends, clean_db)
        names = set(backends.values())
        # Each pool says who it is, so operators (and this test) can tell them apart.
        assert {"threadkeeper-sql", "threadkeeper-checkpointer"} <= names, names
        await asyncio.to_thread(_terminate_all, clean_db, list(backends))

        # Every request after the drop succeeds, on both pools.
        for _ in range(3):
            got = await h.client.get(f"/v1/threads/{tid}/agent-state", headers=AUTH)
            assert got.status_code == 200, got.text
        compress = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert compress.status_code == 200, compress.text
        assert (await state(h, tid))["summary"]["present"] is True

        # And so do later runs.
        await run_turns(h, tid, ["after the drop?", "and once more?"])
        users = [m["content"] for m in await messages(h, tid) if m["role"] == "user"]
        assert users[-2:] == ["after the drop?", "and once more?"]
        fresh = await asyncio.to_thread(_service_backends, clean_db)
        assert not set(fresh) & set(backends)  # all served by new connections


async def test_unreachable_database_answers_503_then_recovers(
    app_factory: AppFactory, clean_db: str
) -> None:
    async with (
        postgres_proxy(clean_db) as proxy,
        app_factory(database_url=proxy.url, db_pool_timeout_seconds=3) as h,
    ):
        tid = await new_thread(h)
        await run_turns(h, tid, ["first question"])
        await state(h, tid)

        await proxy.cut()  # every connection reset, the port closed
        down = [
            await h.client.get(f"/v1/threads/{tid}", headers=AUTH),
            await h.client.get("/v1/threads", headers=AUTH),
            await h.client.get(f"/v1/threads/{tid}/agent-state", headers=AUTH),
            await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH),
            await h.client.get(f"/v1/threads/{tid}/runs", headers=AUTH),
            await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "while down"}, headers=AUTH
            ),
        ]
        for resp in down:
            assert_clean_503(resp)
        assert (await h.client.get("/ready")).status_code == 503

        await proxy.restore()
        # Ready once both pools answer again (psycopg's reconnects on its own backoff), as a
        # load balancer would wait for it; from then on every operation answers.
        async with asyncio.timeout(HANG_GUARD):
            while (await h.client.get("/ready")).status_code != 200:  # noqa: ASYNC110 - polling an HTTP endpoint
                await asyncio.sleep(0.2)
        got = await h.client.get(f"/v1/threads/{tid}/agent-state", headers=AUTH)
        assert got.status_code == 200, got.text
        await run_turns(h, tid, ["after the outage"])
        users = [m["content"] for m in await messages(h, tid) if m["role"] == "user"]
        assert users == ["first question", "after the outage"]  # nothing half-written


async def outage_until_the_run_waits(h: AppHarness, proxy: PostgresProxy, run_id: str) -> None:
    """Keep the database cut until the run noticed and waits for it; then bring it back."""
    worker = h.container.worker
    async with asyncio.timeout(HANG_GUARD):
        while uuid.UUID(run_id) not in worker.waiting_for_database:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    await proxy.restore()


async def test_run_caught_by_an_outage_goes_on_from_its_last_checkpoint(
    app_factory: AppFactory, clean_db: str
) -> None:
    with OpenAICompatibleServer() as srv:
        async with (
            postgres_proxy(clean_db) as proxy,
            app_factory(database_url=proxy.url, llm_base_url=srv.base_url, llm_api_key="k") as h,
        ):
            tid = await new_thread(h)
            srv.hold()
            posted = await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "are you there?"}, headers=AUTH
            )
            assert posted.status_code == 202
            assert await asyncio.to_thread(srv.wait_for_requests, 1, HANG_GUARD)
            [run_id] = await h.run_ids(tid)

            # The model answers while the database is gone: the step's results cannot be saved.
            await proxy.cut(drop_new=True)
            srv.release()
            await outage_until_the_run_waits(h, proxy, run_id)

            run = await h.wait_for_run(tid, statuses={"completed", "failed"}, timeout=HANG_GUARD)
            assert run["id"] == run_id
            assert run["status"] == "completed", (run["error_code"], run["error"])
            # Either the model step ran again from the last checkpoint, or its checkpoint landed
            # once the database answered and the answer was taken from it: one answer either way.
            assert len(srv.requests) in (1, 2)
            history = await messages(h, tid)
            assert [m["role"] for m in history] == ["user", "assistant"]
            events = await h.sse_events(run_id)
            assert events[-1]["data"]["status"] == "completed"
            await run_turns(h, tid, ["and now?"])


async def test_resumed_run_caught_by_an_outage_does_not_replay_the_approval(
    app_factory: AppFactory, clean_db: str
) -> None:
    with OpenAICompatibleServer() as srv:
        srv.enqueue_tool_call("query_kb", {"query": "lease"})
        async with (
            postgres_proxy(clean_db) as proxy,
            app_factory(
                database_url=proxy.url,
                llm_base_url=srv.base_url,
                llm_api_key="k",
                approval_tools="query_kb",
            ) as h,
        ):
            await seed_kb(h)
            tid = await new_thread(h)
            await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "lease?"}, headers=AUTH
            )
            run = await h.wait_for_run(tid, statuses={"interrupted"}, timeout=HANG_GUARD)

            srv.hold()  # the model call after the approved tool is held, then lost
            resumed = await h.client.post(
                f"/v1/runs/{run['id']}/resume",
                json={"decisions": [{"type": "approve"}]},
                headers=AUTH,
            )
            assert resumed.status_code == 200, resumed.text
            assert await asyncio.to_thread(srv.wait_for_requests, 2, HANG_GUARD)
            await proxy.cut(drop_new=True)
            srv.release()
            await outage_until_the_run_waits(h, proxy, run["id"])

            done = await h.wait_for_run(tid, statuses={"completed", "failed"}, timeout=HANG_GUARD)
            assert done["id"] == run["id"]
            assert done["status"] == "completed", (done["error_code"], done["error"])
            # The tool ran once (the approval was not answered again); one final answer.
            history = await messages(h, tid)
            assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
            assert len(srv.requests) in (2, 3)
