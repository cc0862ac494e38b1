"""Issue 14 (API): GetRequest, CancelRequest, WaitRun, Idempotency-Key, computed thread status."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from app.db.urls import libpq_url
from tests.support.api import messages, new_thread
from tests.support.app_harness import AUTH, OTHER_AUTH, AppFactory, AppHarness
from tests.support.openai_server import OpenAICompatibleServer

pytestmark = pytest.mark.integration


async def post(h: AppHarness, tid: str, content: str, **headers: str) -> Any:
    return await h.client.post(
        f"/v1/threads/{tid}/messages", json={"content": content}, headers={**AUTH, **headers}
    )


async def thread_status(h: AppHarness, tid: str) -> str:
    return str((await h.client.get(f"/v1/threads/{tid}", headers=AUTH)).json()["status"])


async def dispatched(h: AppHarness, request_id: str, timeout: float = 60.0) -> dict[str, Any]:
    """GetRequest until a worker took the request (generous: a busy machine is slow)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        body = (await h.client.get(f"/v1/requests/{request_id}", headers=AUTH)).json()
        if body["status"] != "queued":
            return body  # type: ignore[no-any-return]
        assert asyncio.get_running_loop().time() < deadline, body
        await asyncio.sleep(0.05)


async def test_request_then_wait_for_its_run(app_factory: AppFactory) -> None:
    with OpenAICompatibleServer() as srv:
        srv.hold()
        async with app_factory(llm_base_url=srv.base_url, llm_api_key="k") as h:
            tid = await new_thread(h)
            assert await thread_status(h, tid) == "idle"
            accepted = (await post(h, tid, "hello")).json()
            req = await dispatched(h, accepted["request_id"])
            assert req["id"] == accepted["request_id"] and req["thread_id"] == tid
            assert req["message_id"] == accepted["message_id"]
            assert req["status"] == "dispatched" and req["run_status"] == "running"
            run_id = req["run_id"]
            assert await thread_status(h, tid) == "running"

            # The model is held: a short wait answers "running" once its timeout passes.
            short = await h.client.get(f"/v1/runs/{run_id}/wait?timeout=0.2", headers=AUTH)
            assert short.status_code == 200 and short.json()["status"] == "running"

            # A long wait is woken by the run's end, long before its 30 s timeout.
            waiting = asyncio.create_task(
                h.client.get(f"/v1/runs/{run_id}/wait", headers=AUTH, timeout=60)
            )
            assert await asyncio.to_thread(srv.wait_for_requests, 1, 30.0)
            srv.release()
            done = await waiting
            assert done.status_code == 200 and done.json()["status"] == "completed", done.text
            assert done.json()["id"] == run_id

            again = await h.client.get(f"/v1/requests/{accepted['request_id']}", headers=AUTH)
            assert again.json()["run_status"] == "completed"
            assert await thread_status(h, tid) == "idle"

            for path in (f"/v1/requests/{req['id']}", f"/v1/runs/{run_id}/wait?timeout=0"):
                other = await h.client.get(path, headers=OTHER_AUTH)
                assert other.status_code == 404 and other.json()["error"] == "not_found"
            bad = await h.client.get(f"/v1/runs/{run_id}/wait?timeout=31", headers=AUTH)
            assert bad.status_code == 400 and bad.json()["fields"][0]["field"] == "timeout"


async def test_wait_returns_at_once_for_an_interrupted_run(app_factory: AppFactory) -> None:
    async with app_factory(approval_tools="query_kb") as h:
        tid = await new_thread(h)
        accepted = (await post(h, tid, "lease?")).json()
        run_id = (await dispatched(h, accepted["request_id"]))["run_id"]
        waited = await h.client.get(f"/v1/runs/{run_id}/wait", headers=AUTH, timeout=60)
        assert waited.json()["status"] == "interrupted"
        assert await thread_status(h, tid) == "interrupted"


async def test_cancel_a_queued_request_withdraws_its_message(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        tid = await new_thread(h)
        first = (await post(h, tid, "never mind")).json()
        second = (await post(h, tid, "the real question")).json()
        assert await thread_status(h, tid) == "queued"

        queued = await h.client.get(f"/v1/requests/{first['request_id']}", headers=AUTH)
        assert queued.json()["status"] == "queued" and queued.json()["run_id"] is None

        stranger = await h.client.post(
            f"/v1/requests/{first['request_id']}/cancel", headers=OTHER_AUTH
        )
        assert stranger.status_code == 404
        cancelled = await h.client.post(f"/v1/requests/{first['request_id']}/cancel", headers=AUTH)
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["status"] == "cancelled" and cancelled.json()["run_id"] is None
        repeated = await h.client.post(f"/v1/requests/{first['request_id']}/cancel", headers=AUTH)
        assert repeated.status_code == 200 and repeated.json() == cancelled.json()

        history = await messages(h, tid)
        assert [(m["content"], m["withdrawn"]) for m in history] == [
            ("never mind", True),
            ("the real question", False),
        ]

        h.container.worker.start()
        req = await dispatched(h, second["request_id"])
        done = await h.client.get(f"/v1/runs/{req['run_id']}/wait", headers=AUTH, timeout=60)
        assert done.json()["status"] == "completed"
        runs = (await h.client.get(f"/v1/threads/{tid}/runs", headers=AUTH)).json()["items"]
        # Only the second message was answered; the withdrawn one never reached a run.
        assert [r["request_id"] for r in runs] == [second["request_id"]]
        assert (await h.client.get(f"/v1/requests/{first['request_id']}", headers=AUTH)).json()[
            "status"
        ] == "cancelled"
        late = await h.client.post(f"/v1/requests/{second['request_id']}/cancel", headers=AUTH)
        assert late.status_code == 409 and late.json()["error"] == "request_not_queued"
        assert await thread_status(h, tid) == "idle"


async def _lock_waiters(conn: psycopg.AsyncConnection[Any], count: int) -> None:
    """Until ``count`` PostMessage statements wait for a lock (generous: the machine is shared)."""
    for _ in range(1200):
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query ILIKE '%INSERT INTO agent_run_requests%'"
        )
        row = await cur.fetchone()
        if row is not None and row[0] >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never saw {count} posts waiting for the thread's lock")


async def test_same_key_retries_queued_behind_a_lock_get_one_request(
    app_factory: AppFactory,
) -> None:
    """Two retries with one Idempotency-Key both start while the thread's row is locked, so
    both statements' snapshots predate either insert: the second to get the lock does not see
    the first's request and hits the unique index. It must answer the first request (202, same
    body), not fail: the intake write runs again with a fresh snapshot."""
    async with app_factory(start_worker=False, lock_timeout_ms=60_000) as h:
        tid = await new_thread(h)
        url = libpq_url(h.container.database_url)
        async with (
            await psycopg.AsyncConnection.connect(url, autocommit=True) as holder,
            # Another session: pg_stat_activity is read once per transaction, the holder's is open.
            await psycopg.AsyncConnection.connect(url, autocommit=True) as watcher,
        ):
            await holder.execute("BEGIN")
            await holder.execute("SELECT 1 FROM conversations WHERE id = %s FOR UPDATE", (tid,))
            key = {"Idempotency-Key": "held-1"}
            posts = [asyncio.create_task(post(h, tid, "hello", **key)) for _ in range(2)]
            await _lock_waiters(watcher, 2)
            await holder.execute("COMMIT")
            answers = await asyncio.gather(*posts)
        assert [a.status_code for a in answers] == [202, 202], [a.text for a in answers]
        assert answers[0].json() == answers[1].json()
        assert [m["content"] for m in await messages(h, tid)] == ["hello"]


async def test_idempotency_key_replays_and_refuses_reuse(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        tid = await new_thread(h)
        key = {"Idempotency-Key": "msg-0001"}
        # Concurrent retries of one logical message: one message, one body for all.
        answers = await asyncio.gather(*(post(h, tid, "hello", **key) for _ in range(4)))
        assert {a.status_code for a in answers} == {202}
        assert len({a.text for a in answers}) == 1
        assert [m["content"] for m in await messages(h, tid)] == ["hello"]

        reused = await post(h, tid, "something else", **key)
        assert reused.status_code == 422 and reused.json()["error"] == "idempotency_key_reused"
        assert [m["content"] for m in await messages(h, tid)] == ["hello"]

        # Scoped per thread: the same key elsewhere is a new message; no key: never deduplicated.
        other = await new_thread(h)
        elsewhere = await post(h, other, "hello", **key)
        assert elsewhere.status_code == 202
        assert elsewhere.json()["request_id"] != answers[0].json()["request_id"]
        await post(h, tid, "hello")
        assert [m["content"] for m in await messages(h, tid)] == ["hello", "hello"]

        bad = await post(h, tid, "hello", **{"Idempotency-Key": "x" * 201})
        assert bad.status_code == 400
        assert bad.json()["fields"][0]["field"] == "Idempotency-Key"
