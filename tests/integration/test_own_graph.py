"""A graph of the user's own served from its ``langgraph.json`` (issue 33): the hand-built
example (router -> knowledge base -> model, an ``interrupt()`` approval, state keys of its own,
compression opted in) through both HTTP doors, against the local OpenAI-protocol server
streaming tokens; the capability flag on both kinds of graph; a graph raising at run time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client

from tests.support.api import add_doc, messages, new_thread, run_turns, state
from tests.support.app_harness import API_KEY, AUTH, AppFactory, AppHarness
from tests.support.live_server import serve_in_loop
from tests.support.processes import ROOT

pytestmark = pytest.mark.integration

EXAMPLES = ROOT / "examples" / "graphs"
DESK = EXAMPLES / "support_desk" / "langgraph.json"
DOC = "The warranty covers every appliance for two years from the day of purchase."


async def post(h: AppHarness, tid: str, text: str) -> None:
    resp = await h.client.post(f"/v1/threads/{tid}/messages", json={"content": text}, headers=AUTH)
    assert resp.status_code in (200, 201, 202), resp.text


async def test_hand_built_graph_through_v1(app_factory: AppFactory, provider: Any) -> None:
    async with app_factory(agents_file=str(DESK)) as h:
        await add_doc(h, DOC, title="Warranty")
        tid = await new_thread(h)
        provider.enqueue_text("Your appliance is covered for two years.")
        await run_turns(h, tid, ["How long is the warranty?"])
        assert (await messages(h, tid))[-1]["content"] == "Your appliance is covered for two years."
        # The retrieval node searched the agent's knowledge base as the run's owner.
        system = provider.requests[-1]["messages"][0]
        assert system["role"] == "system" and "two years from the day of purchase" in str(system)

        run_id = (await h.run_ids(tid))[0]
        events = await h.sse_events(run_id)
        deltas = [e["data"] for e in events if e["data"].get("type") == "delta"]
        # Streamed token by token from a node named ``respond``, not ``model``.
        assert deltas and {d["node"] for d in deltas} == {"respond"}
        assert "".join(d["text"] for d in deltas) == "Your appliance is covered for two years."
        custom = [e["data"]["data"] for e in events if e["data"].get("type") == "custom"]
        assert custom[:2] == [
            {"stage": "routed", "route": "kb"},
            {"stage": "retrieved", "documents": 1},
        ]

        # Opted in: pressure counted, the capability declared.
        view = await state(h, tid)
        assert (
            view["context"]["pressure"] is not None and view["context"]["pressure_reason"] is None
        )
        assert view["capabilities"]["manual_compression"]["reason"] != "not_supported"
        agent = (await h.client.get("/v1/agents/support_desk", headers=AUTH)).json()
        assert agent["capabilities"] == ["manual_compression"]
        assert agent["model"] == "graph:./graph.py:graph"

        # interrupt(value): the graph's own payload, answered with a plain resume value.
        done = set(await h.run_ids(tid))
        await post(h, tid, "I want a refund for my kettle")
        run = await h.wait_for_run(tid, statuses={"interrupted", "failed"}, exclude=done)
        assert run["status"] == "interrupted", run
        assert run["interrupt"] is None
        assert run["interrupt_value"] == {
            "question": "Promise a refund to this customer?",
            "route": "refund",
        }
        wrong = await h.client.post(
            f"/v1/runs/{run['id']}/resume", json={"decisions": [{"type": "approve"}]}, headers=AUTH
        )
        assert wrong.status_code == 400 and wrong.json()["error"] == "validation_error", wrong.text
        provider.enqueue_text("Your refund is approved.")
        resp = await h.client.post(
            f"/v1/runs/{run['id']}/resume", json={"resume": {"approved": True}}, headers=AUTH
        )
        assert resp.status_code == 200, resp.text
        finished = await h.wait_for_run(tid, statuses={"completed", "failed"}, exclude=done)
        assert finished["status"] == "completed", finished
        assert "A refund was approved." in str(provider.requests[-1]["messages"][0])
        assert (await messages(h, tid))[-1]["content"] == "Your refund is approved."

        # Manual compression with the agent's budget works on the opted-in graph.
        compress = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert compress.status_code in (200, 422), compress.text
        if compress.status_code == 422:
            assert compress.json()["error"] == "nothing_to_compress", compress.text


async def test_hand_built_graph_through_the_langgraph_door(
    app_factory: AppFactory, provider: Any
) -> None:
    async with app_factory(agents_file=str(DESK)) as h, serve_in_loop(h.app) as url:
        await add_doc(h, DOC, title="Warranty")
        client = get_client(url=url, api_key=API_KEY)
        [assistant] = await client.assistants.search()
        assert assistant["graph_id"] == "support_desk"
        # The assistant describes the graph itself: its nodes and its state keys.
        drawn = await client.assistants.get_graph("support_desk")
        assert {n["id"] for n in drawn["nodes"]} >= {"router", "retrieve", "approve", "respond"}
        schemas = await client.assistants.get_schemas("support_desk")
        assert set(schemas["output_schema"]["properties"]) == {
            "messages",
            "route",
            "documents",
            "approved",
        }
        thread = await client.threads.create()
        tid = thread["thread_id"]
        provider.enqueue_text("Covered for two years.")
        parts = [
            (p.event, p.data)
            async for p in client.runs.stream(
                tid,
                "support_desk",
                input={"messages": [{"role": "user", "content": "What about the warranty?"}]},
                stream_mode=["values", "messages-tuple", "custom", "updates"],
            )
        ]
        events = [e for e, _ in parts]
        assert "error" not in events, parts
        tuples = [d for e, d in parts if e == "messages"]
        assert tuples and {
            d[1]["langgraph_node"] for d in tuples if d[0]["type"] == "AIMessageChunk"
        } == {"respond"}
        assert {"stage": "routed", "route": "kb"} in [d for e, d in parts if e == "custom"]

        # Its own state keys are kept and returned in values.
        got = await client.threads.get_state(tid)
        values = got["values"]
        assert values["route"] == "kb"
        assert values["documents"][0]["title"] == "Warranty"
        assert values["threadkeeper"]["manual_compression"]["reason"] != "not_supported"

        # An interrupt(value) passes through; a plain resume answers it.
        parts = [
            (p.event, p.data)
            async for p in client.runs.stream(
                tid,
                "support_desk",
                input={"messages": [{"role": "user", "content": "A refund, please"}]},
                stream_mode=["values", "updates"],
            )
        ]
        interrupts = [
            d["__interrupt__"] for e, d in parts if e == "updates" and "__interrupt__" in d
        ]
        assert interrupts and interrupts[0][0]["value"] == {
            "question": "Promise a refund to this customer?",
            "route": "refund",
        }
        waiting = await client.threads.get_state(tid)
        assert waiting["next"] == ["approve"] and waiting["tasks"][0]["name"] == "approve"
        assert waiting["tasks"][0]["interrupts"][0]["value"]["route"] == "refund"
        provider.enqueue_text("No refund this time.")
        parts = [
            (p.event, p.data)
            async for p in client.runs.stream(
                tid, "support_desk", command={"resume": False}, stream_mode=["values"]
            )
        ]
        assert "error" not in [e for e, _ in parts], parts
        final = await client.threads.get_state(tid)
        assert final["values"]["approved"] is False and final["values"]["route"] == "refund"
        assert final["values"]["messages"][-1]["content"] == "No refund this time."


PLAIN_GRAPH = """
from langchain_core.messages import AIMessage
from langgraph.graph import StateGraph, MessagesState, START, END

class State(MessagesState, total=False):
    turns: int

def answer(state):
    text = state["messages"][-1].content
    if "explode" in text:
        raise ValueError("the graph's own bug")
    return {"messages": [AIMessage(content=f"heard: {text}")], "turns": state.get("turns", 0) + 1}

builder = StateGraph(State)
builder.add_node("answer", answer)
builder.add_edge(START, "answer")
builder.add_edge("answer", END)
graph = builder.compile()
"""


async def test_a_graph_without_compression_says_so_and_fails_alone(
    app_factory: AppFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "plain.py").write_text(PLAIN_GRAPH)
    config = {"graphs": {"plain": "./plain.py:graph"}, "dependencies": ["."]}
    (tmp_path / "langgraph.json").write_text(json.dumps(config))
    async with (
        app_factory(agents_file=str(tmp_path / "langgraph.json")) as h,
        serve_in_loop(h.app) as url,
    ):
        agent = (await h.client.get("/v1/agents/plain", headers=AUTH)).json()
        assert agent["capabilities"] == []
        tid = await new_thread(h)
        await run_turns(h, tid, ["hello", "again"])
        assert [m["content"] for m in await messages(h, tid)] == [
            "hello",
            "heard: hello",
            "again",
            "heard: again",
        ]
        view = await state(h, tid)
        assert view["context"]["pressure"] is None
        assert view["context"]["pressure_reason"].startswith("graph_without_compression")
        assert view["context"]["compression_suggested"] is False
        assert view["capabilities"]["manual_compression"] == {
            "available": False,
            "reason": "not_supported",
            "detail": None,
        }
        resp = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert resp.status_code == 422 and resp.json()["error"] == "not_supported", resp.text

        values = (await get_client(url=url, api_key=API_KEY).threads.get_state(tid))["values"]
        assert values["turns"] == 2
        assert values["threadkeeper"]["pressure"] is None
        assert values["threadkeeper"]["manual_compression"]["reason"] == "not_supported"

        # A graph raising at run time fails its run only: graph_error, the thread goes on.
        done = set(await h.run_ids(tid))
        await post(h, tid, "explode now")
        failed = await h.wait_for_run(tid, statuses={"failed", "completed"}, exclude=done)
        assert failed["status"] == "failed" and failed["error_code"] == "graph_error", failed
        assert "own bug" not in (failed["error"] or "")
        [logged] = [
            r.msg
            for r in caplog.records
            if isinstance(r.msg, dict) and r.msg.get("event") == "run_failed"
        ]
        assert logged["error_code"] == "graph_error" and logged["agent_id"] == "plain"
        assert "ValueError: the graph's own bug" in logged["traceback"]
        assert 'plain.py", line' in logged["traceback"]
        await run_turns(h, tid, ["still there?"])
        assert (await messages(h, tid))[-1]["content"] == "heard: still there?"


async def test_cancel_a_running_and_an_interrupted_own_graph_run(
    app_factory: AppFactory, provider: Any
) -> None:
    async with app_factory(agents_file=str(DESK)) as h:
        tid = await new_thread(h)
        provider.hold()  # the respond node's model call waits
        await post(h, tid, "How long is the warranty?")
        run = await h.wait_for_run(tid, statuses={"running"})
        resp = await h.client.post(f"/v1/runs/{run['id']}/cancel", headers=AUTH)
        assert resp.status_code == 200, resp.text
        final = await h.wait_for_run(tid, statuses={"cancelled", "completed", "failed"})
        assert final["status"] == "cancelled", final
        provider.release()
        provider.block = None

        # Interrupted by interrupt(value), then cancelled: the thread takes new input.
        done = set(await h.run_ids(tid))
        await post(h, tid, "refund please")
        waiting = await h.wait_for_run(tid, statuses={"interrupted", "failed"}, exclude=done)
        assert waiting["status"] == "interrupted", waiting
        resp = await h.client.post(f"/v1/runs/{waiting['id']}/cancel", headers=AUTH)
        assert resp.status_code == 200 and resp.json()["status"] == "cancelled", resp.text
        provider.enqueue_text("Two years.")
        await run_turns(h, tid, ["and the warranty?"])
        assert (await messages(h, tid))[-1]["content"] == "Two years."


async def test_input_to_an_own_graph_runs_first_in_first_out(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    """Three messages posted at once to a thread of an own graph: one run at a time, in the
    order posted, each seeing the answers before it (the graph's own key counts the turns)."""
    (tmp_path / "plain.py").write_text(PLAIN_GRAPH)
    config = {"graphs": {"plain": "./plain.py:graph"}, "dependencies": ["."]}
    (tmp_path / "langgraph.json").write_text(json.dumps(config))
    async with (
        app_factory(agents_file=str(tmp_path / "langgraph.json")) as h,
        serve_in_loop(h.app) as url,
    ):
        tid = await new_thread(h)
        for text in ["one", "two", "three"]:
            await post(h, tid, text)
        done: set[str] = set()
        for _ in range(3):
            run = await h.wait_for_run(tid, statuses={"completed", "failed"}, exclude=done)
            assert run["status"] == "completed", run
            done.add(run["id"])
        # The chat as the LangGraph door shows it (each input where its run took it) and as
        # the graph saw it (its checkpoint) agree: each answer follows its own question.
        values = (await get_client(url=url, api_key=API_KEY).threads.get_state(tid))["values"]
        chat = ["one", "heard: one", "two", "heard: two", "three", "heard: three"]
        assert [m["content"] for m in values["messages"]] == chat
        assert [m["content"] for m in values["threadkeeper"]["model_view"]] == chat
        assert values["turns"] == 3
