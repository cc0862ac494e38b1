"""A tool call never reaches the provider without its result (issue 22, items 2 and 11).

The local provider refuses such a request with HTTP 400, as real providers do. Two ways a run
used to leave one: a lost database connection while the reply with the tool call was being
stored (the retry restarted the graph on the unfinished step), and a worker killed while the
tool ran (the next run's repair then claimed the tool was "not executed").
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import psycopg
import pytest

from app.agents.middlewares.boundary import RESULT_UNKNOWN
from app.db.urls import libpq_url
from tests.support.api import add_doc, messages, new_thread
from tests.support.app_harness import AUTH, AppFactory
from tests.support.openai_server import OpenAICompatibleServer, assert_every_call_answered
from tests.support.processes import app_process, reaped, wait_exit, worker_env
from tests.support.search_backend import LoopbackServer

pytestmark = pytest.mark.integration

#: Guard so a broken retry fails the test instead of hanging the suite (not a timing assertion).
HANG_GUARD = 60.0


def _scalar(url: str, sql: str, *args: Any) -> Any:
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        row = conn.execute(sql, args).fetchone()
    return row[0] if row else None


async def _until(url: str, sql: str, *args: Any) -> Any:
    """The first non-null value ``sql`` returns, polled (bounded by ``HANG_GUARD``)."""
    async with asyncio.timeout(HANG_GUARD):
        while (value := await asyncio.to_thread(_scalar, url, sql, *args)) is None:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    return value


async def kill_the_blocked_message_insert(url: str, tid: str, release: Any) -> None:
    """``release()`` lets the run produce its next step; the worker's insert of that step's
    message is made to wait (a table lock) until the step's writes are saved, then its
    connection is terminated: the step's checkpoint is never written by that attempt."""
    writes = "SELECT count(*) FROM checkpoint_writes WHERE thread_id = %s"
    before = await asyncio.to_thread(_scalar, url, writes, tid)
    blocker = await asyncio.to_thread(psycopg.connect, libpq_url(url))
    try:
        # SHARE conflicts with an INSERT: the worker storing the step's message waits there.
        blocker.execute("LOCK TABLE messages IN SHARE MODE")
        release()
        pid = await _until(
            url,
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query ILIKE '%%INSERT INTO messages%%'",
        )
        await _until(url, f"SELECT 1 WHERE ({writes}) > %s", tid, before)
        await asyncio.to_thread(_scalar, url, "SELECT pg_terminate_backend(%s)", pid)
    finally:
        blocker.rollback()
        blocker.close()


async def test_connection_lost_storing_a_tool_call_reply_goes_on_with_the_tools_step(
    app_factory: AppFactory, clean_db: str
) -> None:
    """The model answered with a tool call; the worker's connection died while it stored the
    reply. The retry used to restart the graph on the "live" state: the model was asked again
    without the tools step (the history kept a call never answered)."""
    with OpenAICompatibleServer() as llm:
        async with app_factory(llm_base_url=llm.base_url, llm_api_key="k") as h:
            await add_doc(h)
            llm.enqueue_tool_call("query_kb", {"query": "lease"})
            llm.enqueue_text("Leases expire without heartbeats.")
            tid = await new_thread(h)
            llm.hold()
            await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "lease?"}, headers=AUTH
            )
            assert await asyncio.to_thread(llm.wait_for_requests, 1, HANG_GUARD)
            await kill_the_blocked_message_insert(clean_db, tid, llm.release)

            run = await h.wait_for_run(tid, statuses={"completed", "failed"}, timeout=HANG_GUARD)
            assert run["status"] == "completed", (run["error_code"], run["error"])
            assert_every_call_answered(llm)
            # The saved reply was reused (no second tool-call request), and the tools step ran
            # before the model was asked again.
            assert len(llm.requests) == 2
            assert [m["role"] for m in llm.requests[1]["messages"]][-2:] == ["assistant", "tool"]
            history = await messages(h, tid)
            assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
            assert history[-1]["content"] == "Leases expire without heartbeats."


async def test_connection_lost_storing_a_tool_result_goes_on_without_rerunning_the_tool(
    app_factory: AppFactory, clean_db: str, hanging_search: HangingSearch
) -> None:
    """The tool finished; the worker's connection died while it stored the result. The retry
    used to restart the graph on the "live" state and send the call without its result (a
    provider's 400); the result must be used as saved, stored once, the tool not run again."""
    with OpenAICompatibleServer() as llm:
        async with app_factory(
            llm_base_url=llm.base_url, llm_api_key="k", web_search_url=hanging_search.url
        ) as h:
            llm.enqueue_tool_call("web_search", {"query": "lease"})
            llm.enqueue_text("Nothing found.")
            tid = await new_thread(h)
            await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "lease?"}, headers=AUTH
            )
            async with asyncio.timeout(HANG_GUARD):
                while hanging_search.calls == 0:  # noqa: ASYNC110 - the tool is running
                    await asyncio.sleep(0.05)
            await kill_the_blocked_message_insert(clean_db, tid, hanging_search.gate.set)

            run = await h.wait_for_run(tid, statuses={"completed", "failed"}, timeout=HANG_GUARD)
            assert run["status"] == "completed", (run["error_code"], run["error"])
            assert_every_call_answered(llm)
            assert hanging_search.calls == 1 and len(llm.requests) == 2
            history = await messages(h, tid)
            assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
            assert history[2]["content"] == llm.requests[1]["messages"][-1]["content"]


class HangingSearch(LoopbackServer):
    """A search backend that receives the call (the tool is running) and holds its answer."""

    def __init__(self) -> None:
        self.calls = 0
        self.gate = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                owner.calls += 1
                owner.gate.wait(HANG_GUARD)
                data = b'{"results": []}'
                try:
                    self.send_response(200)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the worker that asked was killed meanwhile

        super().__init__(Handler)


@pytest.fixture
def hanging_search() -> Iterator[HangingSearch]:
    with HangingSearch() as backend:
        try:
            yield backend
        finally:
            backend.gate.set()


async def test_worker_killed_mid_tool_call_answers_result_unknown(
    app_factory: AppFactory, clean_db: str, tmp_path: Path, hanging_search: HangingSearch
) -> None:
    with OpenAICompatibleServer() as llm:
        llm.enqueue_tool_call("web_search", {"query": "lease"})
        env = worker_env(
            clean_db,
            llm,
            tmp_path,
            "victim",
            THREADKEEPER_LEASE_SECONDS="1.5",
            THREADKEEPER_HEARTBEAT_SECONDS="0.3",
            THREADKEEPER_WEB_SEARCH_URL=hanging_search.url,
        )
        async with app_factory(
            start_worker=False,
            llm_base_url=llm.base_url,
            llm_api_key="k",
            web_search_url=hanging_search.url,
        ) as h:
            tid = await new_thread(h)
            await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "lease?"}, headers=AUTH
            )
            worker = app_process(["worker"], env, tmp_path / "victim.log")
            with reaped(worker):
                async with asyncio.timeout(HANG_GUARD * 2):  # a cold interpreter on a busy box
                    while hanging_search.calls == 0:  # noqa: ASYNC110
                        await asyncio.sleep(0.05)
                worker.send_signal(signal.SIGKILL)  # the tool is running: its effect happened
                assert await wait_exit(worker, 30) == -signal.SIGKILL
            hanging_search.gate.set()
            [run_id] = await h.run_ids(tid)
            async with asyncio.timeout(HANG_GUARD):
                while not await h.container.worker.recover_expired():  # noqa: ASYNC110 - the lease runs out
                    await asyncio.sleep(0.2)
            failed = (await h.client.get(f"/v1/runs/{run_id}", headers=AUTH)).json()
            assert failed["error_code"] == "lease_expired"

            h.container.worker.start()
            llm.enqueue_text("I cannot tell whether the search ran.")
            await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "and now?"}, headers=AUTH
            )
            nxt = await h.wait_for_run(tid, statuses={"completed", "failed"}, exclude={run_id})
            assert nxt["status"] == "completed", (nxt["error_code"], nxt["error"])
            assert hanging_search.calls == 1  # nothing ran the tool again
            tools = [m for m in await messages(h, tid) if m["role"] == "tool"]
            assert [m["content"] for m in tools] == [RESULT_UNKNOWN]
            assert "may have run" in tools[0]["content"]
            assert "Not executed" not in tools[0]["content"]
            assert_every_call_answered(llm)
            sent = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
            assert [m["content"] for m in sent] == [RESULT_UNKNOWN]


async def test_worker_killed_before_the_tools_checkpoint_keeps_the_stored_result_once(
    app_factory: AppFactory, clean_db: str, tmp_path: Path, hanging_search: HangingSearch
) -> None:
    """A step's update is stored as it streams while LangGraph writes its checkpoint in the
    background: a worker killed between the two left the tool's result in the history and the
    call dangling in the checkpoint. The next run's repair then answered the call a second time
    (a second tool row under another id, seen in CI); it must reuse the stored result."""
    with OpenAICompatibleServer() as llm:
        llm.enqueue_tool_call("web_search", {"query": "lease"})
        llm.hold(from_request=1)  # the answer after the tool result, should it be asked for
        env = worker_env(
            clean_db,
            llm,
            tmp_path,
            "victim",
            THREADKEEPER_LEASE_SECONDS="1.5",
            THREADKEEPER_HEARTBEAT_SECONDS="0.3",
            THREADKEEPER_WEB_SEARCH_URL=hanging_search.url,
        )
        async with app_factory(
            start_worker=False,
            llm_base_url=llm.base_url,
            llm_api_key="k",
            web_search_url=hanging_search.url,
        ) as h:
            tid = await new_thread(h)
            await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "lease?"}, headers=AUTH
            )
            worker = app_process(["worker"], env, tmp_path / "victim.log")
            with reaped(worker):
                async with asyncio.timeout(HANG_GUARD * 2):  # a cold interpreter on a busy box
                    while hanging_search.calls == 0:  # noqa: ASYNC110
                        await asyncio.sleep(0.05)
                blocker = await asyncio.to_thread(psycopg.connect, libpq_url(clean_db))
                try:
                    # Granted once every checkpoint written so far is committed; the tools
                    # step's checkpoint then waits behind it, its update does not.
                    blocker.execute("LOCK TABLE checkpoints IN SHARE MODE")
                    hanging_search.gate.set()
                    await _until(
                        clean_db,
                        "SELECT 1 FROM messages WHERE conversation_id = %s AND role = 'tool'",
                        tid,
                    )
                    pid = await _until(
                        clean_db,
                        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                        "AND wait_event_type = 'Lock' AND query ILIKE '%%INSERT INTO checkpoints%%'",
                    )
                    worker.send_signal(signal.SIGKILL)
                    assert await wait_exit(worker, 30) == -signal.SIGKILL
                    # A statement sent before the kill still runs once the lock is gone: end
                    # its backend, so the dead worker's checkpoint is never written.
                    await asyncio.to_thread(
                        _scalar, clean_db, "SELECT pg_terminate_backend(%s)", pid
                    )
                finally:
                    blocker.rollback()
                    blocker.close()
            llm.drop_held()
            [run_id] = await h.run_ids(tid)
            async with asyncio.timeout(HANG_GUARD):
                while not await h.container.worker.recover_expired():  # noqa: ASYNC110 - the lease runs out
                    await asyncio.sleep(0.2)

            h.container.worker.start()
            llm.enqueue_text("Nothing about leases.")
            await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "and now?"}, headers=AUTH
            )
            nxt = await h.wait_for_run(tid, statuses={"completed", "failed"}, exclude={run_id})
            assert nxt["status"] == "completed", (nxt["error_code"], nxt["error"])
            assert hanging_search.calls == 1  # nothing ran the tool again
            history = await messages(h, tid)
            assert [m["role"] for m in history] == [
                "user",
                "assistant",
                "tool",
                "user",
                "assistant",
            ]
            assert history[2]["content"] != RESULT_UNKNOWN
            assert_every_call_answered(llm)
            sent = llm.requests[-1]["messages"]
            assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "user"]
            assert sent[3]["content"] == history[2]["content"]
