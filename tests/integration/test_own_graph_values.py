"""A graph's own state keys in the LangGraph door's run results (issue 33): each ``values`` part
of ``runs.stream`` (one per step, the first at the run's start, ``__interrupt__`` at a stop),
and the results of ``runs.wait`` and ``runs.join``, carry the graph's keys beside ``messages``
exactly as LangGraph's own server returns them: the same ``langgraph-sdk`` scenario
(``tests/support/graph_values.py``) against ``langgraph dev`` serving the same example
produced ``tests/support/graphs/values_reference.json``, and the slow test checks that it
still does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client

from benchmarks.turns_reference import reference_venv
from tests.support.api import run_turns
from tests.support.app_harness import API_KEY, AUTH, AppFactory
from tests.support.graph_values import desk_transcript, project, records_transcript
from tests.support.langgraph_dev import langgraph_dev
from tests.support.live_server import serve_in_loop
from tests.support.openai_server import OpenAICompatibleServer
from tests.support.processes import ROOT, free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

EXAMPLES = ROOT / "examples" / "graphs"
REFERENCE = json.loads((ROOT / "tests/support/graphs/values_reference.json").read_text())
#: Each ``runs.stream`` call's ``updates`` parts (node by node, in order), from ``langgraph dev``.
UPDATES = json.loads((ROOT / "tests/support/graphs/updates_reference.json").read_text())
SCENARIOS = {
    "records_agent": records_transcript,
    "support_desk": desk_transcript,
}


@pytest.mark.parametrize("example", sorted(SCENARIOS))
async def test_values_carry_the_graphs_own_keys_as_langgraph_returns_them(
    app_factory: AppFactory, provider: Any, example: str
) -> None:
    path = EXAMPLES / example / "langgraph.json"
    async with app_factory(agents_file=str(path)) as h, serve_in_loop(h.app) as url:
        got = await SCENARIOS[example](url, API_KEY, provider)
    updates, expected = got.pop("updates"), REFERENCE[example]
    for key in expected:  # one at a time: a mismatch names the call
        assert got[key] == expected[key], key
    # Each node's own update, as LangGraph's server streams it (not rebuilt from messages).
    for key in UPDATES[example]:
        assert updates[key] == UPDATES[example][key], key
    if example == "records_agent":  # what the reference says, in words
        counts = [v.get("model_calls") for v in got["stream"]]
        assert counts == [None, None, 1, 1, 1, 2]  # its middleware's key, step by step
        assert got["join"]["model_calls"] == 7
        assert got["wait_interrupted"]["__interrupt__"][0]["action_requests"][0]["args"] == {
            "record_id": "r1"
        }
    else:
        assert [v.get("route") for v in got["stream"]] == [None, "kb", "kb", "kb"]
        assert got["join"]["approved"] is False and got["join"]["route"] == "refund"


async def test_a_failed_run_keeps_its_keys_beside_the_error(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    """``runs.wait`` of a run that fails: the keys of its last step, and ``__error__``."""
    (tmp_path / "counting.py").write_text(COUNTING_GRAPH)
    config = {"graphs": {"counting": "./counting.py:graph"}, "dependencies": ["."]}
    (tmp_path / "langgraph.json").write_text(json.dumps(config))
    async with (
        app_factory(agents_file=str(tmp_path / "langgraph.json")) as h,
        serve_in_loop(h.app) as url,
    ):
        client = get_client(url=url, api_key=API_KEY)
        tid = (await client.threads.create())["thread_id"]
        ok = await client.runs.wait(
            tid, "counting", input={"messages": [{"role": "user", "content": "one"}]}
        )
        assert ok["seen"] == ["one"] and ok["messages"][-1]["content"] == "heard one"
        failed = await client.runs.wait(
            tid,
            "counting",
            input={"messages": [{"role": "user", "content": "boom"}]},
            raise_error=False,
        )
        assert failed["__error__"]["error"] == "graph_error", failed
        assert failed["seen"] == ["one", "boom"]  # the step before the failing one
        # A stream that joins after the run ended replays its values with the keys.
        runs = await client.runs.list(tid)
        joined = project(await client.runs.join(tid, runs[-1]["run_id"]))
        assert joined == {
            "messages": [["human", "one", []], ["ai", "heard one", []]],
            "seen": ["one"],
        }
        # /v1 serves the same keys as the run's ``state`` events.
        run = (await h.client.get(f"/v1/threads/{tid}/runs", headers=AUTH)).json()["items"][-1]
        events = await h.sse_events(run["id"])
        states = [e["data"]["values"] for e in events if e["data"].get("type") == "state"]
        assert states == [{"seen": []}, {"seen": ["one"]}, {"seen": ["one"]}]
        # ...and each node's update as an ``update`` event, in order.
        updates = [
            (e["data"]["node"], project(e["data"]["update"]))
            for e in events
            if e["data"].get("type") == "update"
        ]
        assert updates == [
            ("note", {"seen": ["one"]}),
            ("answer", {"messages": [["ai", "heard one", []]]}),
        ]
        failing = (await h.client.get(f"/v1/threads/{tid}/runs", headers=AUTH)).json()["items"][0]
        assert [  # the failed run: the node before the failing one
            (e["data"]["node"], e["data"]["update"])
            for e in await h.sse_events(failing["id"])
            if e["data"].get("type") == "update"
        ] == [("note", {"seen": ["boom"]})]
        await run_turns(h, tid, ["two"])


async def test_a_rejoined_stream_keeps_the_keys_of_the_steps_it_skipped(
    app_factory: AppFactory, provider: Any
) -> None:
    """A join stream resumed with ``Last-Event-ID`` after the graph's last step: its
    ``values`` at the interrupt still carry the keys that step set."""
    path = EXAMPLES / "support_desk" / "langgraph.json"
    async with app_factory(agents_file=str(path)) as h, serve_in_loop(h.app) as url:
        client = get_client(url=url, api_key=API_KEY)
        tid = (await client.threads.create())["thread_id"]
        run = await client.runs.create(
            tid,
            "support_desk",
            input={"messages": [{"role": "user", "content": "a refund please"}]},
            stream_mode=["values", "updates"],
        )
        whole = [p async for p in client.runs.join_stream(tid, run["run_id"], last_event_id="0")]
        [stop] = [p for p in whole if p.event == "updates" and "__interrupt__" in p.data]
        assert stop.id is not None and stop.id.endswith("-0"), whole
        rest = [
            (p.event, p.data)
            async for p in client.runs.join_stream(tid, run["run_id"], last_event_id=stop.id)
        ]
        [(event, values)] = [(e, d) for e, d in rest if e != "metadata"]
        assert event == "values" and "__interrupt__" in values
        assert set(values) == {"messages", "route", "__interrupt__"}
        assert values["route"] == "refund"  # set by the router step the stream skipped
        assert [m["content"] for m in values["messages"]] == ["a refund please"]


COUNTING_GRAPH = """
import operator
from typing import Annotated
from langchain_core.messages import AIMessage
from langgraph.graph import StateGraph, MessagesState, START, END

class State(MessagesState, total=False):
    seen: Annotated[list, operator.add]

def note(state):
    return {"seen": [state["messages"][-1].content]}

def answer(state):
    text = state["messages"][-1].content
    if text == "boom":
        raise ValueError("the graph's own bug")
    return {"messages": [AIMessage(content=f"heard {text}")]}

builder = StateGraph(State)
builder.add_node("note", note)
builder.add_node("answer", answer)
builder.add_edge(START, "note")
builder.add_edge("note", "answer")
builder.add_edge("answer", END)
graph = builder
"""


@pytest.mark.slow
@pytest.mark.parametrize("example", sorted(SCENARIOS))
async def test_langgraph_dev_returns_the_reference(tmp_path: Path, example: str) -> None:
    """The reference is what LangGraph's own server returns for the same scenario."""
    langgraph = reference_venv()
    assert langgraph is not None, "the langgraph-reference extra could not be installed"
    served = tmp_path / example
    shutil.copytree(EXAMPLES / example, served)
    port, log_path = free_port(), tmp_path / "langgraph-dev.log"
    url = f"http://127.0.0.1:{port}"
    with OpenAICompatibleServer() as srv:
        extra = {"OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "k"}
        with langgraph_dev(langgraph, served, port, log_path, **extra) as proc:

            async def ready() -> bool:
                assert proc.poll() is None, log_path.read_text()[-3000:]
                try:
                    async with httpx.AsyncClient() as client:
                        return (await client.get(f"{url}/ok")).status_code == 200
                except httpx.HTTPError:
                    return False

            await wait_until(ready, "langgraph dev answers /ok", timeout=180)
            got = await SCENARIOS[example](url, None, srv)
    assert got.pop("updates") == UPDATES[example]
    assert got == REFERENCE[example]
