"""Own graphs that opt in to Threadkeeper's compression get the whole contract (issue 33
item 4), through the public ``threadkeeper`` import, on each agent's own budget (the agents
file's ``graph = ...`` entries): large tool results offloaded to the Workdir with their SHA-256
and shown as previews, the summary, one retry after a provider overflow, manual compression
and the 85% hint, for a ``create_agent`` graph (``CompressionMiddleware``) and a hand-built one
(``compression_node``), against the local OpenAI-protocol server."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from app.compression.tokens import request_base
from tests.support.api import messages, run_turns, state
from tests.support.app_harness import AUTH, AppFactory, AppHarness
from tests.support.openai_server import OpenAICompatibleServer

pytestmark = pytest.mark.integration

GRAPHS = """
import os
from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import StateGraph, MessagesState, START
from langgraph.prebuilt import ToolNode, tools_condition

import threadkeeper

PAGE = " ".join(f"page{i} holds the lease clause {i}." for i in range(700))


@tool
def fetch_page(url: str) -> str:
    \"\"\"Fetch a long web page.\"\"\"
    return PAGE


def model():
    return ChatOpenAI(
        base_url=os.environ["OPENAI_BASE_URL"], api_key="k", model="gpt-test", max_retries=0
    )


agent = create_agent(
    model=model(),
    tools=[fetch_page],
    system_prompt="Answer briefly.",
    middleware=[threadkeeper.CompressionMiddleware()],
)

builder = StateGraph(MessagesState)
builder.add_node("agent", threadkeeper.compression_node(model(), tools=[fetch_page]))
builder.add_node("tools", ToolNode([fetch_page]))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", tools_condition)
builder.add_edge("tools", "agent")
hand_built = builder
"""

TIGHT = {
    "summary_threshold": 1500,
    "tool_result_preview_tokens": 120,
    "summary_keep_recent_tokens": 200,
    "summary_max_tokens": 200,
}


def write_agents(tmp_path: Path) -> str:
    (tmp_path / "graphs.py").write_text(GRAPHS)
    agents = [
        {"id": "middleware", "graph": "./graphs.py:agent", "compression": TIGHT},
        {"id": "node", "graph": "./graphs.py:hand_built", "compression": TIGHT},
        # A large budget: only the provider's overflow makes it compress.
        {"id": "roomy", "graph": "./graphs.py:agent", "compression": {"summary_threshold": 90_000}},
    ]
    path = tmp_path / "agents.json"
    path.write_text(json.dumps({"agents": agents}))
    return str(path)


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Any:
    # The model's window: a request with the whole page (about 5,000 tokens) overflows.
    with OpenAICompatibleServer(context_window=3000) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        yield srv


async def thread_on(h: AppHarness, agent_id: str) -> str:
    resp = await h.client.post(
        "/v1/threads", json={"title": agent_id, "agent_id": agent_id}, headers=AUTH
    )
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]  # type: ignore[no-any-return]


async def assert_offloaded_with_sha256(h: AppHarness, tid: str) -> None:
    view = await state(h, tid)
    [tool] = [m for m in view["messages"] if m["type"] == "tool"]
    assert tool["offload"] is not None, view["messages"]
    f = await h.client.get(f"/v1/threads/{tid}/workdir/{tool['offload']['path']}", headers=AUTH)
    assert f.status_code == 200
    assert hashlib.sha256(f.content).hexdigest() == tool["offload"]["sha256"]
    assert f.text.startswith("page0 holds the lease clause 0.")
    assert tool["offload"]["sha256"] in tool["content"]  # the preview names it
    full = [m for m in await messages(h, tid) if m["role"] == "tool"]
    assert full[0]["content"] == f.text  # the full history keeps the original


@pytest.mark.parametrize("agent_id", ["middleware", "node"])
async def test_automatic_compression_offloads_with_previews(
    app_factory: AppFactory, provider: Any, tmp_path: Path, agent_id: str
) -> None:
    async with app_factory(agents_file=write_agents(tmp_path)) as h:
        agent = (await h.client.get(f"/v1/agents/{agent_id}", headers=AUTH)).json()
        assert agent["capabilities"] == ["manual_compression"]  # read from the graph
        assert agent["budget"]["summary_threshold"] == TIGHT["summary_threshold"]
        tid = await thread_on(h, agent_id)
        provider.enqueue_tool_call("fetch_page", {"url": "https://example.test/lease"})
        provider.enqueue_text("Clause 3 covers it.")
        await run_turns(h, tid, ["Which clause covers leases?"])
        # The second model call saw a preview, not the page: under the threshold, no overflow.
        sent = provider.requests[-1]["messages"]
        [tool] = [m for m in sent if m["role"] == "tool"]
        assert len(tool["content"]) < 2000 and "page0 holds" in tool["content"]
        await assert_offloaded_with_sha256(h, tid)
        # The next request is counted with the prompt and tool schemas the graph sent last.
        runtime = h.container.agents.runtime(agent_id)
        snapshot = await runtime.state().get(tid)
        base = request_base(snapshot.messages)
        assert base > 20  # "Answer briefly." or nothing, and fetch_page's schema
        messages_only = runtime.compressor.count(snapshot.messages)
        assert (await state(h, tid))["context"]["input_tokens"] > messages_only
        run_id = (await h.run_ids(tid))[0]
        kinds = [e["data"] for e in await h.sse_events(run_id)]
        compressions = [e for e in kinds if e.get("type") == "compression"]
        assert compressions and compressions[0]["reason"] == "threshold"
        assert compressions[0]["offloaded"] == 1

        # The 85% hint, then manual compression with the agent's budget under the row lock.
        await run_turns(h, tid, ["Tell me more. " + " ".join(["lease"] * 700)])
        view = await state(h, tid)
        ratio = view["context"]["input_tokens"] / view["context"]["summary_threshold"]
        assert view["context"]["pressure"] == pytest.approx(ratio, abs=1e-3)
        assert view["context"]["compression_suggested"] is (ratio >= 0.85)
        assert view["capabilities"]["manual_compression"] == {
            "available": True,
            "reason": None,
            "detail": None,
        }
        resp = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert resp.status_code == 200, resp.text
        assert resp.json()["summarized"] is True
        after = await state(h, tid)
        assert after["summary"]["present"] is True and after["messages"][0]["is_summary"]
        assert after["context"]["input_tokens"] < view["context"]["input_tokens"]
        # The thread goes on from the compressed view.
        provider.enqueue_text("Still here.")
        await run_turns(h, tid, ["and now?"])
        assert (await messages(h, tid))[-1]["content"] == "Still here."


async def test_a_provider_overflow_compresses_and_retries_once(
    app_factory: AppFactory, provider: Any, tmp_path: Path
) -> None:
    async with app_factory(agents_file=write_agents(tmp_path)) as h:
        tid = await thread_on(h, "roomy")
        provider.enqueue_tool_call("fetch_page", {"url": "https://example.test/lease"})
        provider.enqueue_text("Clause 3.")
        await run_turns(h, tid, ["Which clause covers leases?"])
        # Refused for overflow once (the whole page), then sent with a preview.
        assert len(provider.requests) == 3
        assert (await messages(h, tid))[-1]["content"] == "Clause 3."
        await assert_offloaded_with_sha256(h, tid)
        run_id = (await h.run_ids(tid))[0]
        reasons = [
            e["data"]["reason"]
            for e in await h.sse_events(run_id)
            if e["data"].get("type") == "compression"
        ]
        assert reasons == ["overflow"]
