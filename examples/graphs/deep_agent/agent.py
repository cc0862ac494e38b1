"""A deepagents agent (``create_deep_agent``) served by Threadkeeper as it is (``langgraph.json``
beside it): a planning tool (``write_todos``), a virtual filesystem in the thread's state
(``ls``, ``read_file``, ``write_file``, ``edit_file``), a general-purpose subagent (``task``)
and a tool of its own. Its state keys ``todos`` and ``files`` are kept in the checkpoint and
returned in LangGraph ``values``.

Compression: a deep agent summarizes with its own ``SummarizationMiddleware`` (always in
``create_deep_agent``'s stack). Use one compression, not both: this agent keeps its own, so
Threadkeeper serves it without its compression contract (manual compression
``not_supported``, pressure not counted). For Threadkeeper's instead, build the agent with
``create_agent`` and ``threadkeeper.CompressionMiddleware()`` in place of the summarization
(``examples/graphs/records_agent``).

The model is any OpenAI-compatible endpoint: ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``,
``DEEP_AGENT_MODEL``.
"""

from __future__ import annotations

import os

from deepagents import create_deep_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

SHELVES = {"atlas": "Shelf 4, travel", "cookbook": "Shelf 2, kitchen"}


@tool
def find_book(title: str) -> str:
    """Where a book of the library is shelved."""
    return SHELVES.get(title.lower(), f"no book called {title}")


agent = create_deep_agent(
    model=ChatOpenAI(
        base_url=os.environ.get("OPENAI_BASE_URL") or None,
        api_key=os.environ.get("OPENAI_API_KEY") or "not-needed",  # type: ignore[arg-type]
        model=os.environ.get("DEEP_AGENT_MODEL", "gpt-4o-mini"),
        max_retries=0,
    ),
    tools=[find_book],
    system_prompt="You are a librarian. Plan with write_todos; keep notes in files.",
)
