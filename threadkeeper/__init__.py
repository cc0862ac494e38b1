"""Threadkeeper's compression contract for a LangGraph graph of your own.

Serve your graph with Threadkeeper (``THREADKEEPER_AGENTS_FILE=langgraph.json``) and opt in here
to the same compression its own agents get, on the agent's one ``summary_threshold``: automatic
compression (large tool results offloaded to the thread's Workdir with their SHA-256 and shown
as structured previews, then a summary), one retry after a provider context overflow, manual
compression (CompressContext) and the 85% hint in GetAgentState.

- ``create_agent`` graphs: ``middleware=[CompressionMiddleware(), ...]``;
- hand-built ``StateGraph`` graphs: a node ``compression_node(model)``, or inside your own node
  ``await compressed_model_call(model, state["messages"])`` (the ``messages`` update to return);
- ``search_knowledge_base(query)``: the agent's knowledge base (as ``query_kb`` answers).

Outside a Threadkeeper run (``langgraph dev``, a unit test) each of them calls the model as it
is, so the same graph file runs anywhere.
"""

from __future__ import annotations

from typing import Any

from app.compression.binding import active_binding
from app.compression.middleware import (
    ThreadkeeperCompression as CompressionMiddleware,
)
from app.compression.middleware import (
    compressed_model_call,
    compression_node,
)

__all__ = [
    "CompressionMiddleware",
    "compressed_model_call",
    "compression_node",
    "in_threadkeeper",
    "search_knowledge_base",
]


def in_threadkeeper() -> bool:
    """Whether this call runs inside a Threadkeeper run (its compression applies)."""
    return active_binding() is not None


async def search_knowledge_base(query: str, limit: int = 5) -> dict[str, Any]:
    """The thread's agent's knowledge base searched as the run's owner: ``{"results": [...]}``
    (id, doc_id, source, title, url, score, content), as the built-in ``query_kb`` answers.
    Outside a Threadkeeper run: no results."""
    binding = active_binding()
    if binding is None or binding.search is None:
        return {"results": []}
    return await binding.search(query, limit)
