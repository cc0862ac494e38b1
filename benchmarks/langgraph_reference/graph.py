"""The agent graph shape Threadkeeper runs (model -> query_kb -> model), for LangGraph's own
server (``langgraph dev``, in-memory runtime): ``graph`` with the offline extractive model
(``benchmarks/turns.py``), ``provider_graph`` with an OpenAI-protocol provider
(``benchmarks/providers.py``). No checkpointer here: the server brings its own."""

from __future__ import annotations

import json
import os
from typing import Any

from langchain.agents import create_agent
from langchain_core.tools import tool

from app.compression.tool_names import QUERY_KB
from app.offline.extractive import ExtractiveChatModel


@tool(QUERY_KB)
async def query_kb(query: str, limit: int = 8) -> str:
    """Search the knowledge base. Returns JSON with count and results (id, doc_id, source,
    title, url, score, content). Cite result ids in answers."""
    return json.dumps({"query": query, "count": 0, "results": []})


graph = create_agent(
    model=ExtractiveChatModel(),
    tools=[query_kb],
    system_prompt="You are a helpful assistant.",
    name="threadkeeper",
)


def _provider_model() -> Any:
    """The same OpenAI-protocol provider as Threadkeeper's agent in ``benchmarks/providers.py``
    (``TK_PROVIDER_BASE_URL``), with the client's own defaults (its retries included), streamed
    as a chat UI would have it."""
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        base_url=os.environ.get("TK_PROVIDER_BASE_URL", "http://127.0.0.1:9/v1"),
        api_key="bench-provider-key",  # type: ignore[arg-type]
        model="gpt-test",
        streaming=True,
        stream_usage=True,
    )


provider_graph = create_agent(
    model=_provider_model(),
    tools=[query_kb],
    system_prompt="You are a helpful assistant.",
    name="threadkeeper",
)
