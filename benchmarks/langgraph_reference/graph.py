"""The agent graph shape Threadkeeper runs (model -> query_kb -> model, the offline extractive
model), for LangGraph's own server (``langgraph dev``, in-memory runtime) in
``benchmarks/turns.py``. No checkpointer here: the server brings its own."""

from __future__ import annotations

import json

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
