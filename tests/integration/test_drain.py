"""Graceful drain with two real worker processes: SIGTERM hands unfinished runs over."""

from __future__ import annotations

import asyncio
import signal
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from app.db.urls import libpq_url
from tests.support.api import messages, new_thread
from tests.support.app_harness import AUTH, AppFactory
from tests.support.openai_server import OpenAICompatibleServer
from tests.support.processes import app_process, reaped, wait_exit, worker_check, worker_env
from tests.support.search_backend import SearchBackend
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_sigterm_finishes_or_hands_over_and_never_reruns_a_tool(
    app_factory: AppFactory, clean_db: str, tmp_path: Path
) -> None:
    gate = threading.Event()  # model calls answered by the responder wait for it

    def held_answer(_: dict[str, Any]) -> str:
        gate.wait(120)
        return "Leases expire without heartbeats [kb]."

    with OpenAICompatibleServer() as srv, SearchBackend() as search:
        srv.enqueue_tool_call("web_search", {"query": "lease expiry"})
        srv.responder = held_answer
        common = {"THREADKEEPER_WEB_SEARCH_URL": search.url}
        env_a = worker_env(clean_db, srv, tmp_path, "a", THREADKEEPER_DRAIN_SECONDS="1", **common)
        env_b = worker_env(clean_db, srv, tmp_path, "b", THREADKEEPER_DRAIN_SECONDS="60", **common)
        assert worker_check(env_a).returncode == 1  # no heartbeat yet: unhealthy
        async with app_factory(start_worker=False) as h:
            tid = await new_thread(h)
            await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "lease?"}, headers=AUTH
            )
            worker_a = app_process(["worker"], env_a, tmp_path / "a.log")
            worker_b = None
            with reaped(worker_a):
                # A ran the tool and is now in the second model call, held by the gate.
                await wait_until(
                    lambda: asyncio.sleep(0, len(srv.requests) >= 2), "the second model call"
                )
                assert len(search.calls) == 1
                check = worker_check(env_a)
                assert check.returncode == 0, check.stderr
                worker_a.send_signal(signal.SIGTERM)
                # 1 s to finish (it cannot), then the handoff: A exits on its own, cleanly.
                assert await wait_exit(worker_a, 90) == 0, (tmp_path / "a.log").read_text()
            run = (await h.client.get(f"/v1/threads/{tid}/runs", headers=AUTH)).json()["items"]
            assert [r["status"] for r in run] == ["running"]  # released, not failed
            run_id = run[0]["id"]

            gate.set()
            worker_b = app_process(["worker"], env_b, tmp_path / "b.log")
            with reaped(worker_b):
                done = await h.wait_for_run(tid, statuses={"completed", "failed"}, timeout=90)
                assert done["id"] == run_id and done["status"] == "completed", done
                # The web_search that A ran was in the checkpoint: B did not run it again.
                assert len(search.calls) == 1
                history = await messages(h, tid)
                assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
                assert not any("Not executed" in m["content"] for m in history)
                events = await h.sse_events(run_id)
                assert any(e["data"].get("handoff") for e in events if e["event"] == "status")

                # Second case: a turn that can finish within the drain window is finished by
                # the draining worker itself (B has 60 s; the answer comes after 0.5 s).
                gate.clear()
                other = await new_thread(h)
                seen = len(srv.requests)
                await h.client.post(
                    f"/v1/threads/{other}/messages", json={"content": "hi"}, headers=AUTH
                )
                await wait_until(
                    lambda: asyncio.sleep(0, len(srv.requests) > seen), "B's model call"
                )
                worker_b.send_signal(signal.SIGTERM)
                await asyncio.sleep(0.5)
                gate.set()
                assert await wait_exit(worker_b, 90) == 0, (tmp_path / "b.log").read_text()
                finished = (await h.client.get(f"/v1/threads/{other}/runs", headers=AUTH)).json()
                assert finished["items"][0]["status"] == "completed"
    logs = (tmp_path / "a.log").read_text() + (tmp_path / "b.log").read_text()
    assert "worker_handing_off" in logs and "run_taken_over" in logs
    with psycopg.connect(libpq_url(clean_db)) as conn:
        (dupes,) = conn.execute(
            "SELECT count(*) FROM (SELECT lc_id FROM messages WHERE lc_id IS NOT NULL "
            "GROUP BY conversation_id, lc_id HAVING count(*) > 1) d"
        ).fetchone()  # type: ignore[misc]
        assert dupes == 0


async def test_run_released_before_its_input_was_checkpointed_starts_from_that_input(
    app_factory: AppFactory,
) -> None:
    """A drain can release a run before its first graph step stored the user message; the
    next worker must then run that input, not 'continue' the previous turn's finished state."""
    async with app_factory(start_worker=False) as h:
        tid = await new_thread(h)
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "lease?"}, headers=AUTH)
        worker = h.container.worker
        claimed = await worker.claim_next()
        assert claimed is not None
        await worker.release(claimed)  # what drain does to a run that has not stepped yet
        runs = (await h.client.get(f"/v1/threads/{tid}/runs", headers=AUTH)).json()["items"]
        assert [r["status"] for r in runs] == ["running"]
        worker.start()
        done = await h.wait_for_run(tid, statuses={"completed", "failed"}, timeout=60)
        assert done["id"] == runs[0]["id"] and done["status"] == "completed", done
        history = await messages(h, tid)
        assert history[0]["role"] == "user" and history[-1]["role"] == "assistant"
        state = (await h.client.get(f"/v1/threads/{tid}/agent-state", headers=AUTH)).json()
        assert [m["content"] for m in state["messages"] if m["type"] == "human"] == ["lease?"]
