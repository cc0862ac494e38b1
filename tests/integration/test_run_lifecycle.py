"""Interrupts, resume, cancel, lease recovery after a killed worker, and a real HTTP model."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import psycopg
import pytest

from app.agents.middlewares.boundary import NOT_APPROVED
from app.compression.tokens import REQUEST_TOKENS_KEY
from app.db.urls import libpq_url
from tests.support.api import add_doc, messages, new_thread
from tests.support.app_harness import API_KEY, AUTH, OTHER_KEY, AppFactory
from tests.support.openai_server import OpenAICompatibleServer
from tests.support.processes import app_process, reaped

pytestmark = pytest.mark.integration


async def test_interrupt_then_approve_resumes_to_completion(app_factory: AppFactory) -> None:
    async with app_factory(approval_tools="query_kb") as h:
        await add_doc(h)
        tid = await new_thread(h)
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "lease?"}, headers=AUTH)
        run = await h.wait_for_run(tid, statuses={"interrupted", "completed", "failed"})
        assert run["status"] == "interrupted", run
        action = run["interrupt"]["action_requests"][0]
        assert action["name"] == "query_kb" and action["args"]["query"] == "lease?"
        # The gated tool has not run: only user + assistant(tool call) are persisted.
        assert [m["role"] for m in await messages(h, tid)] == ["user", "assistant"]

        # An interrupted run makes the thread busy for manual compression.
        busy = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert busy.status_code == 409 and busy.json()["error"] == "thread_busy"

        wrong = await h.client.post(
            f"/v1/runs/{run['id']}/resume",
            json={"decisions": [{"type": "approve"}, {"type": "approve"}]},
            headers=AUTH,
        )
        assert wrong.status_code == 400 and wrong.json()["error"] == "validation_error"
        ok = await h.client.post(
            f"/v1/runs/{run['id']}/resume", json={"decisions": [{"type": "approve"}]}, headers=AUTH
        )
        assert ok.status_code == 200, ok.text
        done = await h.wait_for_run(tid, statuses={"completed", "failed"})
        assert done["status"] == "completed" and done["id"] == run["id"]
        assert [m["role"] for m in await messages(h, tid)] == [
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
        again = await h.client.post(
            f"/v1/runs/{run['id']}/resume", json={"decisions": [{"type": "approve"}]}, headers=AUTH
        )
        assert again.status_code == 409 and again.json()["error"] == "invalid_state"


async def test_interrupt_then_reject_tells_the_model(app_factory: AppFactory) -> None:
    async with app_factory(approval_tools="query_kb") as h:
        tid = await new_thread(h)
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "lease?"}, headers=AUTH)
        run = await h.wait_for_run(tid, statuses={"interrupted"})
        resp = await h.client.post(
            f"/v1/runs/{run['id']}/resume",
            json={"decisions": [{"type": "reject", "message": "not allowed today"}]},
            headers=AUTH,
        )
        assert resp.status_code == 200
        await h.wait_for_run(tid, statuses={"completed"})
        history = await messages(h, tid)
        tool = [m for m in history if m["role"] == "tool"]
        assert len(tool) == 1 and "not allowed today" in tool[0]["content"]


async def test_interrupt_respond_and_edit_decisions_are_checked_at_resume(
    app_factory: AppFactory,
) -> None:
    """The interrupt offered ``respond`` but ResumeRun refused it; edited arguments were only
    checked when the tool ran. Both are now decided at resume time."""
    async with app_factory(approval_tools="query_kb") as h:
        await add_doc(h)
        tid = await new_thread(h)
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "lease?"}, headers=AUTH)
        run = await h.wait_for_run(tid, statuses={"interrupted"})
        offered = run["interrupt"]["review_configs"][0]["allowed_decisions"]
        assert "respond" in offered and "edit" in offered
        url = f"/v1/runs/{run['id']}/resume"

        # Edited arguments that cannot bind: 422 with the fields named, and nothing changes.
        for args, names in [({"limit": "many"}, ["query", "limit"]), ({"query": ["x"]}, ["query"])]:
            bad = await h.client.post(
                url, json={"decisions": [{"type": "edit", "args": args}]}, headers=AUTH
            )
            assert bad.status_code == 422, bad.text
            assert bad.json()["error"] == "invalid_tool_arguments"
            assert all(name in bad.json()["detail"] for name in names), bad.text
        no_message = await h.client.post(
            url, json={"decisions": [{"type": "respond"}]}, headers=AUTH
        )
        assert no_message.status_code == 400 and no_message.json()["error"] == "validation_error"
        still = (await h.client.get(f"/v1/runs/{run['id']}", headers=AUTH)).json()
        assert still["status"] == "interrupted" and still["interrupt"] == run["interrupt"]

        # ``respond``: the human's text is the tool result; the tool itself never runs.
        answer = "Ask the on-call engineer; leases are 30 seconds here."
        ok = await h.client.post(
            url, json={"decisions": [{"type": "respond", "message": answer}]}, headers=AUTH
        )
        assert ok.status_code == 200, ok.text
        done = await h.wait_for_run(tid, statuses={"completed", "failed"})
        assert done["status"] == "completed", done["error"]
        tool = [m for m in await messages(h, tid) if m["role"] == "tool"]
        assert [m["content"] for m in tool] == [answer]

        # A valid edit runs the tool with the reviewer's arguments.
        await h.client.post(
            f"/v1/threads/{tid}/messages", json={"content": "heartbeat?"}, headers=AUTH
        )
        second = await h.wait_for_run(tid, statuses={"interrupted"}, exclude={run["id"]})
        edited = await h.client.post(
            f"/v1/runs/{second['id']}/resume",
            json={"decisions": [{"type": "edit", "args": {"query": "heartbeat", "limit": 2}}]},
            headers=AUTH,
        )
        assert edited.status_code == 200, edited.text
        final = await h.wait_for_run(tid, statuses={"completed", "failed"}, exclude={run["id"]})
        assert final["status"] == "completed", final["error"]
        result = [m for m in await messages(h, tid) if m["role"] == "tool"][-1]
        # langchain prefixes an edited call's result with a notice, then the tool's own JSON.
        payload = json.loads(result["content"].split("Tool response:\n", 1)[1])
        assert payload["query"] == "heartbeat" and payload["count"] >= 1


async def test_edit_decisions_take_the_same_shape_on_both_doors(app_factory: AppFactory) -> None:
    """Issue 30: /v1 takes LangGraph's ``edited_action: {name, args}`` too; the LangGraph door
    answers an edit sent in /v1's older ``args`` shape with a 422 naming ``edited_action``."""
    async with app_factory(approval_tools="query_kb") as h:
        await add_doc(h)
        tid = await new_thread(h)
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "lease?"}, headers=AUTH)
        run = await h.wait_for_run(tid, statuses={"interrupted"})
        url = f"/v1/runs/{run['id']}/resume"
        edit = {"name": "query_kb", "args": {"query": "heartbeat", "limit": 2}}

        renamed = await h.client.post(
            url,
            json={"decisions": [{"type": "edit", "edited_action": {**edit, "name": "other"}}]},
            headers=AUTH,
        )
        assert renamed.status_code == 400, renamed.text
        assert "edited_action.name" in renamed.json()["detail"]
        lg_body = {
            "assistant_id": "default",
            "command": {"resume": {"decisions": [{"type": "edit", "args": edit["args"]}]}},
        }
        lg = await h.client.post(
            f"/threads/{tid}/runs/wait", json=lg_body, headers={"X-Api-Key": API_KEY}
        )
        assert lg.status_code == 422, lg.text
        assert lg.json()["fields"] == [
            {
                "field": "command.resume.decisions[0].edited_action",
                "message": lg.json()["detail"],
            }
        ]
        assert "edited_action: {name, args}" in lg.json()["detail"]
        still = (await h.client.get(f"/v1/runs/{run['id']}", headers=AUTH)).json()
        assert still["status"] == "interrupted"

        ok = await h.client.post(
            url, json={"decisions": [{"type": "edit", "edited_action": edit}]}, headers=AUTH
        )
        assert ok.status_code == 200, ok.text
        final = await h.wait_for_run(tid, statuses={"completed", "failed"})
        assert final["status"] == "completed", final["error"]
        result = [m for m in await messages(h, tid) if m["role"] == "tool"][-1]
        payload = json.loads(result["content"].split("Tool response:\n", 1)[1])
        assert payload["query"] == "heartbeat"


async def test_cancel_interrupted_run_frees_the_thread(app_factory: AppFactory) -> None:
    async with app_factory(approval_tools="query_kb") as h:
        await add_doc(h)
        tid = await new_thread(h)
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "lease?"}, headers=AUTH)
        run = await h.wait_for_run(tid, statuses={"interrupted"})
        cancelled = await h.client.post(f"/v1/runs/{run['id']}/cancel", headers=AUTH)
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        again = await h.client.post(f"/v1/runs/{run['id']}/cancel", headers=AUTH)
        assert again.status_code == 409
        # The next message runs on the same thread: the dangling tool call was answered first.
        await h.client.post(
            f"/v1/threads/{tid}/messages", json={"content": "heartbeat?"}, headers=AUTH
        )
        await h.client.post(
            f"/v1/runs/{run['id']}/resume", json={"decisions": [{"type": "approve"}]}, headers=AUTH
        )
        nxt = await h.wait_for_run(tid, statuses={"interrupted", "failed"}, exclude={run["id"]})
        assert nxt["id"] != run["id"] and nxt["status"] == "interrupted", nxt
        await h.client.post(
            f"/v1/runs/{nxt['id']}/resume", json={"decisions": [{"type": "approve"}]}, headers=AUTH
        )
        final = await h.wait_for_run(tid, statuses={"completed", "failed"})
        assert final["status"] == "completed", final
        # The cancelled call never ran (it waited for approval), and its answer says so.
        tools = [m["content"] for m in await messages(h, tid) if m["role"] == "tool"]
        assert tools[0] == NOT_APPROVED


async def test_cancel_running_run_over_http_model(app_factory: AppFactory) -> None:
    with OpenAICompatibleServer() as srv:
        srv.hold()
        async with app_factory(llm_base_url=srv.base_url, llm_api_key="k") as h:
            tid = await new_thread(h)
            await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "slow"}, headers=AUTH
            )
            run = await h.wait_for_run(tid, statuses={"running"})
            assert await asyncio.to_thread(srv.wait_for_requests, 1, 10.0)
            resp = await h.client.post(f"/v1/runs/{run['id']}/cancel", headers=AUTH)
            assert resp.status_code == 200
            final = await h.wait_for_run(tid, statuses={"cancelled", "completed", "failed"})
            assert final["status"] == "cancelled", final
            srv.drop_held()
            await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "again"}, headers=AUTH
            )
            nxt = await h.wait_for_run(tid, statuses={"completed", "failed"}, exclude={run["id"]})
            assert nxt["status"] == "completed", nxt["error"]
            history = await messages(h, tid)
            assert [m["content"] for m in history if m["role"] == "assistant"] == ["Echo: again"]


async def test_turn_over_openai_compatible_http_with_tool_call_and_usage(
    app_factory: AppFactory,
) -> None:
    with OpenAICompatibleServer(api_key="secret-k") as srv:
        async with app_factory(llm_base_url=srv.base_url, llm_api_key="secret-k") as h:
            await add_doc(h)
            srv.enqueue_tool_call("query_kb", {"query": "lease"})
            srv.enqueue_text("Leases expire when the worker stops [kb].")
            tid = await new_thread(h)
            await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "explain leases"}, headers=AUTH
            )
            run = await h.wait_for_run(tid, statuses={"completed", "failed"})
            assert run["status"] == "completed", run
            assert run["model_calls"] == 2 and run["input_tokens"] > 0
            assert len(srv.requests) == 2
            second = srv.requests[1]["messages"]
            assert second[0]["role"] == "system"
            assert any(m["role"] == "tool" and "lease" in m["content"].lower() for m in second)
            assert {t["function"]["name"] for t in srv.requests[0]["tools"]} >= {
                "query_kb",
                "read_workdir_file",
            }
            assert srv.requests[0].get("stream") is True  # tokens are streamed, not awaited whole
            texts = [
                e["data"]["text"] for e in await h.sse_events(run["id"]) if e["event"] == "delta"
            ]
            assert "".join(texts) == "Leases expire when the worker stops [kb]."
            # The reply records our count of the exact request sent; the state endpoint then
            # reports pressure in the provider's measure (its usage / our count).
            agent = h.container.agent
            snap = await agent.graph.aget_state(agent.config_for(tid))
            msgs = snap.values["messages"]
            last = msgs[-1]
            counter = agent.compressor.counter
            sent = counter.count_request(agent.system_message, agent.tools, msgs[:-1])
            assert last.response_metadata[REQUEST_TOKENS_KEY] == sent
            ratio = last.usage_metadata["input_tokens"] / sent
            assert ratio != 1.0  # the fake provider counts differently from us
            state = (await h.client.get(f"/v1/threads/{tid}/agent-state", headers=AUTH)).json()
            raw = counter.count_request(agent.system_message, agent.tools, msgs)
            assert state["context"]["input_tokens"] == round(raw * max(0.5, min(2.0, ratio)))


@pytest.mark.slow  # a real process
async def test_killed_worker_lease_expires_and_run_is_recovered(
    app_factory: AppFactory, clean_db: str, tmp_path: Path
) -> None:
    """A separate worker process is SIGKILLed mid-run; the lease expires; nothing is duplicated."""
    with OpenAICompatibleServer() as srv:
        srv.enqueue_tool_call("query_kb", {"query": "lease"})
        env = {
            "DATABASE_URL": clean_db,
            "THREADKEEPER_LLM_BASE_URL": srv.base_url,
            "THREADKEEPER_LLM_API_KEY": "k",
            "THREADKEEPER_LEASE_SECONDS": "1.5",
            "THREADKEEPER_HEARTBEAT_SECONDS": "0.3",
            "THREADKEEPER_WORKER_POLL_SECONDS": "0.1",
            "THREADKEEPER_WORKDIR_ROOT": str(tmp_path / "wd"),
            "THREADKEEPER_API_KEYS": f"alice:{API_KEY},bob:{OTHER_KEY}",
            "THREADKEEPER_LOG_LEVEL": "WARNING",
        }
        async with app_factory(start_worker=False, llm_base_url=srv.base_url, llm_api_key="k") as h:
            await add_doc(h)
            tid = await new_thread(h)
            # The second model call (after the tool ran) is held: the worker dies there.
            srv.hold(from_request=1)
            await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "lease?"}, headers=AUTH
            )
            proc = app_process(["worker"], env, tmp_path / "worker.log")
            with reaped(proc):
                # A cold interpreter on a machine shared by several suites took over 60 s.
                await asyncio.to_thread(srv.wait_for_requests, 2, 240)
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
            srv.drop_held()
            run = (await h.client.get(f"/v1/threads/{tid}/runs", headers=AUTH)).json()["items"][0]
            assert run["status"] == "running"
            before = await messages(h, tid)
            assert [m["role"] for m in before] == ["user", "assistant", "tool"]

            await asyncio.sleep(1.8)  # lease (1.5 s) runs out without heartbeats
            recovered = await h.container.worker.recover_expired()
            assert recovered == 1
            failed = (await h.client.get(f"/v1/runs/{run['id']}", headers=AUTH)).json()
            assert failed["status"] == "failed" and "lease expired" in failed["error"]
            assert await h.container.worker.recover_expired() == 0

            # The thread is usable again and history has no duplicates.
            h.container.worker.start()
            srv.enqueue_text("recovered answer")
            await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "and now?"}, headers=AUTH
            )
            nxt = await h.wait_for_run(tid, statuses={"completed", "failed"}, exclude={run["id"]})
            assert nxt["status"] == "completed", nxt["error"]
            after = await messages(h, tid)
            assert [m["role"] for m in after] == ["user", "assistant", "tool", "user", "assistant"]
            assert len({m["id"] for m in after}) == len(after)
    with psycopg.connect(libpq_url(clean_db)) as conn:
        (dupes,) = conn.execute(
            "SELECT count(*) FROM (SELECT lc_id FROM messages WHERE lc_id IS NOT NULL "
            "GROUP BY conversation_id, lc_id HAVING count(*) > 1) d"
        ).fetchone()  # type: ignore[misc]
        assert dupes == 0


async def test_heartbeat_survives_a_lost_connection(app_factory: AppFactory, clean_db: str) -> None:
    """The heartbeat's backend is killed while it waits on the run row; the run still completes."""
    with OpenAICompatibleServer() as srv:
        srv.hold()
        async with app_factory(
            llm_base_url=srv.base_url, llm_api_key="k", heartbeat_seconds=0.3, lease_seconds=5.0
        ) as h:
            tid = await new_thread(h)
            await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "hi"}, headers=AUTH)
            run = await h.wait_for_run(tid, statuses={"running"})
            killed = 0
            url = libpq_url(clean_db)
            async with (
                await psycopg.AsyncConnection.connect(url) as holder,
                await psycopg.AsyncConnection.connect(url, autocommit=True) as watcher,
                holder.transaction(),
            ):
                await holder.execute(
                    "SELECT 1 FROM agent_runs WHERE id = %s FOR UPDATE", (run["id"],)
                )
                for _ in range(200):
                    cur = await watcher.execute(
                        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND query LIKE 'UPDATE agent_runs SET lease_expires_at%%'"
                    )
                    pids = [r[0] for r in await cur.fetchall()]
                    for pid in pids:
                        await watcher.execute("SELECT pg_terminate_backend(%s)", (pid,))
                    killed += len(pids)
                    if killed:
                        break
                    await asyncio.sleep(0.05)
            assert killed >= 1, "the heartbeat never waited on the locked run row"
            srv.release()
            final = await h.wait_for_run(tid, statuses={"completed", "failed", "cancelled"})
            assert final["status"] == "completed", final["error"]


async def test_a_recovered_run_stops_writing(app_factory: AppFactory, clean_db: str) -> None:
    """Once another worker recovered the run, the stale one must not add to the history."""
    with OpenAICompatibleServer() as srv:
        srv.hold()
        # No heartbeat within the test: one between the UPDATE below and the recovery renewed
        # the lease and nothing was recovered (seen on a loaded machine).
        async with app_factory(
            llm_base_url=srv.base_url, llm_api_key="k", heartbeat_seconds=60.0, lease_seconds=120.0
        ) as h:
            tid = await new_thread(h)
            await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "hi"}, headers=AUTH)
            run = await h.wait_for_run(tid, statuses={"running"})
            assert await asyncio.to_thread(srv.wait_for_requests, 1, 10.0)
            with psycopg.connect(libpq_url(clean_db), autocommit=True) as conn:
                conn.execute(
                    "UPDATE agent_runs SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
                    (run["id"],),
                )
            assert await h.container.worker.recover_expired() == 1
            srv.release()  # the stale run gets its answer and must not store it
            srv.block = None
            for _ in range(400):  # until the stale run task has ended
                if not h.container.worker._runs:
                    break
                await asyncio.sleep(0.05)
            assert not h.container.worker._runs
            got = (await h.client.get(f"/v1/runs/{run['id']}", headers=AUTH)).json()
            assert got["status"] == "failed" and "lease expired" in got["error"]
            roles = [m["role"] for m in await messages(h, tid)]
            assert roles == ["user"], roles  # the stale answer was not persisted


async def test_one_oversized_message_does_not_break_the_thread(app_factory: AppFactory) -> None:
    """A message larger than the provider's window fails its own turn with a clear error; the
    next turn summarizes it (clipped, in chunks that fit) and the thread goes on."""
    with OpenAICompatibleServer(context_window=3000) as srv:
        async with app_factory(
            llm_base_url=srv.base_url,
            llm_api_key="k",
            summary_threshold=2500,
            summary_max_tokens=300,
            summary_keep_recent_tokens=200,
        ) as h:
            tid = await new_thread(h)
            huge = " ".join(f"word{i}" for i in range(4000))
            await h.client.post(f"/v1/threads/{tid}/messages", json={"content": huge}, headers=AUTH)
            first = await h.wait_for_run(tid, statuses={"completed", "failed"})
            assert first["status"] == "failed"
            assert first["error_code"] == "context_overflow"
            assert "maximum context" not in first["error"]  # fixed text, not the provider's

            await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "hello"}, headers=AUTH
            )
            second = await h.wait_for_run(
                tid, statuses={"completed", "failed"}, exclude={first["id"]}
            )
            assert second["status"] == "completed", second["error"]
            # Every request the provider accepted fit its window (the 400s were the only misses).
            state = (await h.client.get(f"/v1/threads/{tid}/agent-state", headers=AUTH)).json()
            assert state["messages"][0]["is_summary"] is True
            assert state["context"]["input_tokens"] < 2500
            # The full message is still in the persisted history.
            history = await messages(h, tid)
            assert history[0]["content"] == huge


async def test_nul_in_model_output_is_stored_without_it(app_factory: AppFactory) -> None:
    """PostgreSQL text cannot hold NUL; a provider may still send one. The run must not fail."""
    with OpenAICompatibleServer() as srv:
        srv.enqueue_text("before\u0000after")
        async with app_factory(llm_base_url=srv.base_url, llm_api_key="k") as h:
            tid = await new_thread(h)
            await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "hi"}, headers=AUTH)
            run = await h.wait_for_run(tid, statuses={"completed", "failed"})
            assert run["status"] == "completed", run["error"]
            answers = [m["content"] for m in await messages(h, tid) if m["role"] == "assistant"]
            assert answers == ["beforeafter"]
