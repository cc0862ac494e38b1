"""SIGTERM of ``python -m app serve`` while a client follows an interrupted run (issue 22, item
4): the stream ends cleanly at once, the server does not wait for it, and the in-process
worker's drain/handoff runs before the process exits (within the grace period)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from app.db.urls import libpq_url
from tests.support.app_harness import API_KEY, AUTH
from tests.support.openai_server import OpenAICompatibleServer
from tests.support.processes import app_process, free_port, reaped, wait_exit, wait_ready
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

#: Generous bound for the whole stop (drain 1 s + handoff 1 s): a process still up then kept
#: waiting for the stream (the old behaviour never ends without a SIGKILL).
GRACE_SECONDS = 60


def run_row(db: str, run_id: str) -> tuple[str, str | None]:
    with psycopg.connect(libpq_url(db)) as conn:
        row = conn.execute(
            "SELECT status, lease_holder FROM agent_runs WHERE id = %s", (run_id,)
        ).fetchone()
    assert row is not None
    return str(row[0]), row[1]


async def newest_run(client: httpx.AsyncClient, tid: str, statuses: set[str]) -> dict[str, Any]:
    found: dict[str, Any] = {}

    async def reached() -> bool:
        items = (await client.get(f"/v1/threads/{tid}/runs", headers=AUTH)).json()["items"]
        found.update(items[0] if items else {})
        return bool(items) and items[0]["status"] in statuses

    await wait_until(reached, f"a run in {statuses}")
    return found


async def test_sigterm_ends_open_streams_and_drains_the_in_process_worker(
    clean_db: str, tmp_path: Path
) -> None:
    gate = threading.Event()
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    with OpenAICompatibleServer() as srv:
        srv.enqueue_tool_call("query_kb", {"query": "lease"})  # needs approval: interrupted
        env = {
            "DATABASE_URL": clean_db,
            "THREADKEEPER_LLM_BASE_URL": srv.base_url,
            "THREADKEEPER_LLM_API_KEY": "k",
            "THREADKEEPER_API_KEYS": f"alice:{API_KEY}",
            "THREADKEEPER_APPROVAL_TOOLS": "query_kb",
            "THREADKEEPER_WORKER_POLL_SECONDS": "0.1",
            "THREADKEEPER_HEARTBEAT_SECONDS": "0.5",
            "THREADKEEPER_LEASE_SECONDS": "30",
            "THREADKEEPER_DRAIN_SECONDS": "1",
            # Far beyond GRACE_SECONDS: only streams that end by themselves let it exit in time.
            "THREADKEEPER_HTTP_SHUTDOWN_TIMEOUT_SECONDS": "600",
            "THREADKEEPER_WORKDIR_ROOT": str(tmp_path / "wd"),
            "THREADKEEPER_WORKER_HEARTBEAT_FILE": str(tmp_path / "hb"),
            "THREADKEEPER_LOG_JSON": "true",
        }
        proc = app_process(["serve", "--port", str(port)], env, log)
        with reaped(proc):
            await wait_ready(base_url, proc, log)
            async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
                # Thread 1: an interrupted run, followed by a client.
                t1 = (await client.post("/v1/threads", json={}, headers=AUTH)).json()["id"]
                await client.post(f"/v1/threads/{t1}/messages", json={"content": "q"}, headers=AUTH)
                interrupted = await newest_run(client, t1, {"interrupted"})
                # Thread 2: a run busy in a model call that will not answer before the stop.
                srv.responder = lambda _: (gate.wait(120), "late answer")[1]
                t2 = (await client.post("/v1/threads", json={}, headers=AUTH)).json()["id"]
                await client.post(f"/v1/threads/{t2}/messages", json={"content": "q"}, headers=AUTH)
                busy = await newest_run(client, t2, {"running"})
                await wait_until(lambda: asyncio.sleep(0, len(srv.requests) >= 2), "model call")
                assert run_row(clean_db, busy["id"])[1] is not None  # leased

                lines: list[str] = []
                opened = asyncio.Event()

                async def follow() -> None:
                    url = f"/v1/runs/{interrupted['id']}/events"
                    async with client.stream("GET", url, headers=AUTH) as r:
                        assert r.status_code == 200
                        async for line in r.aiter_lines():
                            lines.append(line)
                            if line == "":
                                opened.set()

                stream = asyncio.create_task(follow())
                await asyncio.wait_for(opened.wait(), 60)  # its events so far arrived
                proc.send_signal(signal.SIGTERM)
                code = await wait_exit(proc, GRACE_SECONDS)
                gate.set()
                assert code == 0, log.read_text()[-3000:]
                # The stream ended by itself, as a complete body (no transport error).
                await asyncio.wait_for(stream, 10)
                assert any('"status":"interrupted"' in x for x in lines), lines
                with contextlib.suppress(Exception):
                    srv.responder = None
    # The drain ran before the exit: the busy run was handed over (released, not failed) and
    # the interrupted one is untouched.
    assert run_row(clean_db, busy["id"]) == ("running", None)
    assert run_row(clean_db, interrupted["id"])[0] == "interrupted"
    assert "worker_handing_off" in log.read_text()
