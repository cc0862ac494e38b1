"""The ``create_agent`` example of ``examples/graphs/records_agent`` (a middleware of its own
with a state key ``model_calls``, Threadkeeper's compression, ``delete_record`` behind
approval) served from its ``langgraph.json``: its own state keys round-trip through the
LangGraph door, an approval is answered on both doors, and a worker killed with SIGKILL in the
middle of one of its runs is recovered as Threadkeeper's own agents are; a draining worker hands
its run over at a step boundary; a database outage mid-run of the hand-built example is ridden
out without running its committed steps again (issue 33)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langgraph_sdk import get_client

from app.db.urls import libpq_url
from tests.support.api import messages, new_thread
from tests.support.app_harness import API_KEY, AUTH, OTHER_KEY, AppFactory
from tests.support.live_server import serve_in_loop
from tests.support.processes import ROOT, app_process, reaped, wait_exit, worker_env
from tests.support.tcp_proxy import postgres_proxy
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

RECORDS = ROOT / "examples" / "graphs" / "records_agent" / "langgraph.json"


async def test_create_agent_example_on_both_doors(app_factory: AppFactory, provider: Any) -> None:
    async with app_factory(agents_file=str(RECORDS)) as h, serve_in_loop(h.app) as url:
        client = get_client(url=url, api_key=API_KEY)
        tid = (await client.threads.create())["thread_id"]
        provider.enqueue_tool_call("lookup_record", {"record_id": "r1"})
        provider.enqueue_text("Record r1 is Ada Lovelace.")
        parts = [
            (p.event, p.data)
            async for p in client.runs.stream(
                tid,
                "records",
                input={"messages": [{"role": "user", "content": "who is r1?"}]},
                stream_mode=["values", "messages-tuple"],
            )
        ]
        assert "error" not in [e for e, _ in parts], parts
        values = (await client.threads.get_state(tid))["values"]
        assert values["messages"][-1]["content"] == "Record r1 is Ada Lovelace."
        assert values["model_calls"] == 2  # the graph's own middleware's key, kept
        tk = values["threadkeeper"]
        assert tk["pressure"] is not None and tk["manual_compression"]["reason"] != "not_supported"

        # The gated tool on /v1: the HITLRequest, answered with decisions.
        provider.enqueue_tool_call("delete_record", {"record_id": "r2"})
        provider.enqueue_text("Deleted.")
        done = set(await h.run_ids(tid))
        await h.client.post(
            f"/v1/threads/{tid}/messages", json={"content": "delete r2"}, headers=AUTH
        )
        run = await h.wait_for_run(tid, statuses={"interrupted", "failed"}, exclude=done)
        assert run["status"] == "interrupted", run
        assert run["interrupt"]["action_requests"][0]["name"] == "delete_record"
        assert run["interrupt_value"] is None
        resp = await h.client.post(
            f"/v1/runs/{run['id']}/resume", json={"decisions": [{"type": "approve"}]}, headers=AUTH
        )
        assert resp.status_code == 200, resp.text
        finished = await h.wait_for_run(tid, statuses={"completed", "failed"}, exclude=done)
        assert finished["status"] == "completed", finished
        tools = [m["content"] for m in await messages(h, tid) if m["role"] == "tool"]
        assert tools[-1] == "deleted r2"
        values = (await client.threads.get_state(tid))["values"]
        assert values["model_calls"] == 4


@pytest.mark.slow  # a real process
async def test_a_killed_worker_mid_run_of_an_own_graph_is_recovered(
    app_factory: AppFactory, clean_db: str, tmp_path: Path, provider: Any
) -> None:
    env = {
        "DATABASE_URL": clean_db,
        "THREADKEEPER_AGENTS_FILE": str(RECORDS),
        "OPENAI_BASE_URL": provider.base_url,
        "OPENAI_API_KEY": "k",
        "THREADKEEPER_LEASE_SECONDS": "1.5",
        "THREADKEEPER_HEARTBEAT_SECONDS": "0.3",
        "THREADKEEPER_WORKER_POLL_SECONDS": "0.1",
        "THREADKEEPER_WORKDIR_ROOT": str(tmp_path / "wd"),
        "THREADKEEPER_API_KEYS": f"alice:{API_KEY},bob:{OTHER_KEY}",
        "THREADKEEPER_LOG_LEVEL": "WARNING",
    }
    provider.enqueue_tool_call("lookup_record", {"record_id": "r1"})
    provider.hold(from_request=1)  # the answer after the tool result: the worker dies there
    async with app_factory(start_worker=False, agents_file=str(RECORDS)) as h:
        tid = await new_thread(h)
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "r1?"}, headers=AUTH)
        proc = app_process(["worker"], env, tmp_path / "worker.log")
        with reaped(proc):
            await asyncio.to_thread(provider.wait_for_requests, 2, 240)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        provider.drop_held()
        run = (await h.client.get(f"/v1/threads/{tid}/runs", headers=AUTH)).json()["items"][0]
        assert run["status"] == "running"
        assert [m["role"] for m in await messages(h, tid)] == ["user", "assistant", "tool"]

        await asyncio.sleep(1.8)  # the lease (1.5 s) runs out without heartbeats
        assert await h.container.worker.recover_expired() == 1
        failed = (await h.client.get(f"/v1/runs/{run['id']}", headers=AUTH)).json()
        assert failed["status"] == "failed" and "lease expired" in failed["error"]

        # The thread goes on from the committed checkpoint; nothing is duplicated.
        h.container.worker.start()
        provider.enqueue_text("recovered answer")
        await h.client.post(
            f"/v1/threads/{tid}/messages", json={"content": "and now?"}, headers=AUTH
        )
        nxt = await h.wait_for_run(tid, statuses={"completed", "failed"}, exclude={run["id"]})
        assert nxt["status"] == "completed", nxt["error"]
        after = await messages(h, tid)
        assert [m["role"] for m in after] == ["user", "assistant", "tool", "user", "assistant"]
        assert after[-1]["content"] == "recovered answer"
        sent = provider.requests[-1]["messages"]
        # The tool's committed result reached the model once, answered, before the new turn.
        assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "user"]
    with psycopg.connect(libpq_url(clean_db)) as conn:
        (dupes,) = conn.execute(
            "SELECT count(*) FROM (SELECT lc_id FROM messages WHERE lc_id IS NOT NULL "
            "GROUP BY conversation_id, lc_id HAVING count(*) > 1) d"
        ).fetchone()  # type: ignore[misc]
        assert dupes == 0


@pytest.mark.slow  # real processes
async def test_a_draining_worker_hands_an_own_graph_run_over_at_a_step_boundary(
    app_factory: AppFactory, clean_db: str, tmp_path: Path, provider: Any
) -> None:
    gate = threading.Event()  # the answer after the tool result waits for it

    def held_answer(_: dict[str, Any]) -> str:
        gate.wait(120)
        return "Record r1 is Ada Lovelace."

    provider.enqueue_tool_call("lookup_record", {"record_id": "r1"})
    provider.responder = held_answer
    own = {"THREADKEEPER_AGENTS_FILE": str(RECORDS), "OPENAI_BASE_URL": provider.base_url}
    env_a = worker_env(clean_db, provider, tmp_path, "a", THREADKEEPER_DRAIN_SECONDS="1", **own)
    env_b = worker_env(clean_db, provider, tmp_path, "b", **own)
    async with app_factory(start_worker=False, agents_file=str(RECORDS)) as h:
        tid = await new_thread(h)
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "r1?"}, headers=AUTH)
        worker_a = app_process(["worker"], env_a, tmp_path / "a.log")
        with reaped(worker_a):
            await wait_until(
                lambda: asyncio.sleep(0, len(provider.requests) >= 2), "the second model call"
            )
            worker_a.send_signal(signal.SIGTERM)
            assert await wait_exit(worker_a, 90) == 0, (tmp_path / "a.log").read_text()
        [run] = (await h.client.get(f"/v1/threads/{tid}/runs", headers=AUTH)).json()["items"]
        assert run["status"] == "running"  # released, not failed
        gate.set()
        worker_b = app_process(["worker"], env_b, tmp_path / "b.log")
        with reaped(worker_b):
            done = await h.wait_for_run(tid, statuses={"completed", "failed"}, timeout=90)
            assert done["id"] == run["id"] and done["status"] == "completed", done
        history = await messages(h, tid)
        assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
        assert history[-1]["content"] == "Record r1 is Ada Lovelace."
        events = await h.sse_events(run["id"])
        assert any(e["data"].get("handoff") for e in events if e["event"] == "status")
    logs = (tmp_path / "a.log").read_text() + (tmp_path / "b.log").read_text()
    assert "worker_handing_off" in logs and "run_taken_over" in logs


async def test_an_outage_mid_run_of_an_own_graph_is_ridden_out_without_rerunning_steps(
    app_factory: AppFactory, clean_db: str, provider: Any
) -> None:
    """support_desk: router and retrieve committed, then the database goes away while the
    respond node's model call is answered; the run goes on from its last checkpoint once the
    database answers, the committed steps not run again."""
    desk = ROOT / "examples" / "graphs" / "support_desk" / "langgraph.json"
    async with (
        postgres_proxy(clean_db) as proxy,
        app_factory(database_url=proxy.url, agents_file=str(desk)) as h,
    ):
        tid = await new_thread(h)
        provider.hold()
        await h.client.post(
            f"/v1/threads/{tid}/messages", json={"content": "warranty?"}, headers=AUTH
        )
        assert await asyncio.to_thread(provider.wait_for_requests, 1, 60)
        [run_id] = await h.run_ids(tid)
        await proxy.cut(drop_new=True)
        provider.release()
        async with asyncio.timeout(60):  # a hang guard, not a timing assertion
            while uuid.UUID(run_id) not in h.container.worker.waiting_for_database:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        await proxy.restore()
        run = await h.wait_for_run(tid, statuses={"completed", "failed"}, timeout=60)
        assert run["id"] == run_id and run["status"] == "completed", run
        assert [m["role"] for m in await messages(h, tid)] == ["user", "assistant"]
        events = [e["data"] for e in await h.sse_events(run_id)]
        routed = [e for e in events if e.get("type") == "custom" and e["data"]["stage"] == "routed"]
        assert len(routed) == 1  # the router's step was committed: not run again
        assert len(provider.requests) in (1, 2)
