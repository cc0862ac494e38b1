"""The deepagents example (``examples/graphs/deep_agent``: ``create_deep_agent`` with a tool of
its own) served from its ``langgraph.json`` through both HTTP doors (issue 33): its built-in
planning and filesystem tools write its own state keys (``todos``, ``files``), which come back
in LangGraph ``values``; tokens stream from its ``model`` node; it keeps its own summarization,
so Threadkeeper's manual compression is ``not_supported`` and its pressure is not counted."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph_sdk import get_client

from tests.support.api import messages, new_thread, run_turns, state
from tests.support.app_harness import API_KEY, AUTH, AppFactory
from tests.support.live_server import serve_in_loop
from tests.support.processes import ROOT

pytestmark = pytest.mark.integration

DEEP = ROOT / "examples" / "graphs" / "deep_agent" / "langgraph.json"
TODOS = [{"content": "find the atlas", "status": "in_progress"}]


async def test_a_deep_agent_through_the_langgraph_door(
    app_factory: AppFactory, provider: Any
) -> None:
    async with app_factory(agents_file=str(DEEP)) as h, serve_in_loop(h.app) as url:
        client = get_client(url=url, api_key=API_KEY)
        [assistant] = await client.assistants.search()
        assert assistant["graph_id"] == "librarian"
        tid = (await client.threads.create())["thread_id"]
        provider.enqueue_tool_call("write_todos", {"todos": TODOS})
        provider.enqueue_tool_call("find_book", {"title": "atlas"})
        provider.enqueue_text("The atlas is on shelf 4.")
        parts = [
            (p.event, p.data)
            async for p in client.runs.stream(
                tid,
                "librarian",
                input={"messages": [{"role": "user", "content": "Where is the atlas?"}]},
                stream_mode=["values", "messages-tuple"],
            )
        ]
        assert "error" not in [e for e, _ in parts], parts
        tokens = [d for e, d in parts if e == "messages" and d[0]["type"] == "AIMessageChunk"]
        assert "".join(d[0]["content"] for d in tokens) == "The atlas is on shelf 4."
        assert {d[1]["langgraph_node"] for d in tokens} == {"model"}
        values = [d for e, d in parts if e == "values"]
        # Its planning tool's key, in the values of the step that wrote it and after.
        assert "todos" not in values[0] and values[-1]["todos"] == TODOS
        assert values[-1]["messages"][-1]["content"] == "The atlas is on shelf 4."
        tools = [m["content"] for m in values[-1]["messages"] if m["type"] == "tool"]
        assert tools[-1] == "Shelf 4, travel"
        # The planning tool saw the request: the deep agent's own prompt and tools were sent.
        sent = provider.requests[0]
        assert {"write_todos", "write_file", "task", "find_book"} <= {
            t["function"]["name"] for t in sent["tools"]
        }
        got = await client.threads.get_state(tid)
        assert got["values"]["todos"] == TODOS
        tk = got["values"]["threadkeeper"]
        assert tk["manual_compression"]["reason"] == "not_supported"
        assert tk["pressure"] is None


async def test_a_deep_agent_through_v1_keeps_its_own_summarization(
    app_factory: AppFactory, provider: Any
) -> None:
    async with app_factory(agents_file=str(DEEP)) as h, serve_in_loop(h.app) as url:
        agent = (await h.client.get("/v1/agents/librarian", headers=AUTH)).json()
        assert agent["capabilities"] == []  # its summarization is its own
        tid = await new_thread(h)
        provider.enqueue_tool_call(
            "write_file", {"file_path": "/notes.md", "content": "atlas: shelf 4"}
        )
        provider.enqueue_text("Noted.")
        await run_turns(h, tid, ["Note where the atlas is."])
        assert [m["role"] for m in await messages(h, tid)] == [
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
        view = await state(h, tid)
        assert view["capabilities"]["manual_compression"]["reason"] == "not_supported"
        assert view["context"]["pressure"] is None
        resp = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert resp.status_code == 422 and resp.json()["error"] == "not_supported", resp.text
        # The file it wrote lives in its own state, returned in LangGraph values.
        values = (await get_client(url=url, api_key=API_KEY).threads.get_state(tid))["values"]
        assert "atlas: shelf 4" in str(values["files"]["/notes.md"]["content"])
