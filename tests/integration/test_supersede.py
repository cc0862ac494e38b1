"""Issue 32 item 5: input while an approval is pending supersedes it, on both doors (the local
OpenAI-protocol provider streaming tokens and calling an approval-gated tool; the official
langgraph-sdk against a served app), unless the agent opts for queueing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client

from app.agents.middlewares.boundary import SUPERSEDED_CALL
from tests.support.agents_files import agents_file
from tests.support.api import add_doc, messages, new_thread
from tests.support.app_harness import API_KEY, AUTH, AppFactory
from tests.support.live_server import serve_in_loop
from tests.support.openai_server import OpenAICompatibleServer, assert_every_call_answered
from tests.support.processes import ROOT

pytestmark = pytest.mark.integration


def human(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def provider(srv: OpenAICompatibleServer) -> dict[str, Any]:
    return {"llm_base_url": srv.base_url, "llm_api_key": "k", "approval_tools": "query_kb"}


async def test_v1_message_supersedes_a_pending_approval(app_factory: AppFactory) -> None:
    with OpenAICompatibleServer() as srv:
        srv.enqueue_tool_call("query_kb", {"query": "lease"}, call_id="call-waiting")
        async with app_factory(**provider(srv)) as h:
            await add_doc(h)
            tid = await new_thread(h)
            await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "look it up"}, headers=AUTH
            )
            waiting = await h.wait_for_run(tid, statuses={"interrupted", "completed", "failed"})
            assert waiting["status"] == "interrupted", waiting

            posted = await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "never mind, hi"}, headers=AUTH
            )
            assert posted.status_code == 202, posted.text
            assert posted.json()["superseded_run_id"] == waiting["id"]
            old = (await h.client.get(f"/v1/runs/{waiting['id']}", headers=AUTH)).json()
            assert old["status"] == "cancelled" and old["error_code"] == "superseded"
            # The same run cannot be answered any more.
            late = await h.client.post(
                f"/v1/runs/{waiting['id']}/resume",
                json={"decisions": [{"type": "approve"}]},
                headers=AUTH,
            )
            assert late.status_code == 409
            done = await h.wait_for_run(
                tid, statuses={"completed", "failed"}, exclude={waiting["id"]}
            )
            assert done["status"] == "completed", done
            history = await messages(h, tid)
            # The full record in the order things happened: the new message, then (when its
            # run started) the waiting call's answer, then the reply.
            assert [(m["role"], m["content"]) for m in history if m["role"] != "assistant"] == [
                ("user", "look it up"),
                ("user", "never mind, hi"),
                ("tool", SUPERSEDED_CALL),
            ]
            assert history[-1]["content"] == "Echo: never mind, hi"
        # The provider never saw the waiting call without its answer, and saw the answer.
        assert_every_call_answered(srv)
        last = srv.requests[-1]["messages"]
        assert any(
            m.get("role") == "tool" and m.get("tool_call_id") == "call-waiting" for m in last
        )
        assert [m["content"] for m in last if m.get("role") == "tool"] == [SUPERSEDED_CALL]


async def test_an_agent_may_keep_queueing_behind_an_approval(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    with OpenAICompatibleServer() as srv:
        srv.enqueue_tool_call("query_kb", {"query": "lease"})
        agent = {
            "id": "default",
            "model": "openai:m",
            "base_url": srv.base_url,
            "api_key_env": "TK_TEST_KEY",
            "approval_tools": ["query_kb"],
            "on_input_while_interrupted": "queue",
        }
        file = agents_file(tmp_path, agent)
        with pytest.MonkeyPatch.context() as env:
            env.setenv("TK_TEST_KEY", "k")
            async with app_factory(agents_file=file) as h:
                await add_doc(h)
                tid = await new_thread(h)
                await h.client.post(
                    f"/v1/threads/{tid}/messages", json={"content": "look it up"}, headers=AUTH
                )
                waiting = await h.wait_for_run(tid, statuses={"interrupted"})
                posted = await h.client.post(
                    f"/v1/threads/{tid}/messages", json={"content": "hello?"}, headers=AUTH
                )
                assert posted.status_code == 202 and posted.json()["superseded_run_id"] is None
                request = (
                    await h.client.get(f"/v1/requests/{posted.json()['request_id']}", headers=AUTH)
                ).json()
                assert request["status"] == "queued"
                still = (await h.client.get(f"/v1/runs/{waiting['id']}", headers=AUTH)).json()
                assert still["status"] == "interrupted"


async def test_langgraph_run_supersedes_a_pending_approval(app_factory: AppFactory) -> None:
    """Both multitask strategies: a new run on an interrupted thread is not ``busy``."""
    with OpenAICompatibleServer() as srv:
        srv.enqueue_tool_call("query_kb", {"query": "lease"}, call_id="call-a")
        async with app_factory(**provider(srv)) as h, serve_in_loop(h.app) as url:
            await add_doc(h)
            client = get_client(url=url, api_key=API_KEY)
            tid = (await client.threads.create())["thread_id"]
            parts = [
                p
                async for p in client.runs.stream(
                    tid, "default", input=human("look it up"), stream_mode=["values"]
                )
            ]
            first_run = parts[0].data["run_id"]
            assert "__interrupt__" in [p.data for p in parts if p.event == "values"][-1]
            assert (await client.threads.get(tid))["status"] == "interrupted"

            streamed = [
                p
                async for p in client.runs.stream(
                    tid,
                    "default",
                    input=human("forget it, say hi"),
                    stream_mode=["values", "messages-tuple"],
                    multitask_strategy="reject",
                )
            ]
            final = [p.data for p in streamed if p.event == "values"][-1]["messages"]
            # The full history in the order things happened: the new input, then (as its run
            # starts) the waiting call's answer, then the reply.
            assert [m["type"] for m in final] == ["human", "ai", "human", "tool", "ai"]
            assert final[3]["content"] == SUPERSEDED_CALL and final[3]["tool_call_id"] == "call-a"
            assert final[-1]["content"] == "Echo: forget it, say hi"
            assert "__interrupt__" not in [p.data for p in streamed if p.event == "values"][-1]
            # Tokens streamed as they came.
            assert any(p.event == "messages" for p in streamed)
            assert (await client.threads.get(tid))["status"] == "idle"
            runs = await client.runs.list(tid)
            assert [r["status"] for r in runs] == ["success", "interrupted"]
            assert runs[1]["run_id"] == first_run
        assert_every_call_answered(srv)


async def test_a_graphs_own_interrupt_is_dropped_by_new_input(
    app_factory: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An own graph waiting on ``interrupt(value)`` (the support desk's refund approval): new
    input supersedes it too; the pending interrupt is dropped and the input runs."""
    desk = ROOT / "examples" / "graphs" / "support_desk" / "langgraph.json"
    with OpenAICompatibleServer() as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        async with app_factory(agents_file=str(desk)) as h, serve_in_loop(h.app) as url:
            tid = await new_thread(h)
            await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "refund please"}, headers=AUTH
            )
            waiting = await h.wait_for_run(tid, statuses={"interrupted", "failed", "completed"})
            assert waiting["status"] == "interrupted", waiting
            srv.enqueue_text("Two years.")
            posted = await h.client.post(
                f"/v1/threads/{tid}/messages",
                json={"content": "and the warranty?"},
                headers=AUTH,
            )
            assert posted.json()["superseded_run_id"] == waiting["id"]
            done = await h.wait_for_run(
                tid, statuses={"completed", "failed", "interrupted"}, exclude={waiting["id"]}
            )
            assert done["status"] == "completed", done
            assert (await messages(h, tid))[-1]["content"] == "Two years."
            state = await get_client(url=url, api_key=API_KEY).threads.get_state(tid)
            assert state["tasks"] == [] and state["interrupts"] == []
        assert_every_call_answered(srv)


async def test_input_sent_while_running_supersedes_the_approval_it_then_asks(
    app_factory: AppFactory,
) -> None:
    """A message queued while the run streams; the run then stops for approval: the queued
    message supersedes it at once (as LangGraph's server runs the next queued input)."""
    with OpenAICompatibleServer() as srv:
        srv.enqueue_tool_call("query_kb", {"query": "lease"}, call_id="call-late")
        gate = srv.hold()
        async with app_factory(**provider(srv)) as h:
            await add_doc(h)
            tid = await new_thread(h)
            await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "look it up"}, headers=AUTH
            )
            first = await h.wait_for_run(tid, statuses={"running"})
            posted = await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "actually, hi"}, headers=AUTH
            )
            assert posted.json()["superseded_run_id"] is None  # it was running: queued
            gate.set()
            done = await h.wait_for_run(
                tid, statuses={"completed", "failed", "interrupted"}, exclude={first["id"]}
            )
            assert done["status"] == "completed", done
            old = (await h.client.get(f"/v1/runs/{first['id']}", headers=AUTH)).json()
            assert old["status"] == "cancelled" and old["error_code"] == "superseded"
            history = await messages(h, tid)
            assert [m["content"] for m in history if m["role"] == "tool"] == [SUPERSEDED_CALL]
            assert history[-1]["content"] == "Echo: actually, hi"
        assert_every_call_answered(srv)
