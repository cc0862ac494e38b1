"""A ``create_agent`` graph served by Threadkeeper as it is (``langgraph.json`` beside it): a
middleware of its own (``CallCounter``: a state key ``model_calls``), Threadkeeper's compression
(``threadkeeper.CompressionMiddleware``), and ``delete_record`` behind LangChain's
``HumanInTheLoopMiddleware`` (approve, edit, reject or respond, on both HTTP doors).

The model is any OpenAI-compatible endpoint: ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``,
``RECORDS_MODEL``.
"""

from __future__ import annotations

import os
from typing import Any, NotRequired

from langchain.agents import AgentState, create_agent
from langchain.agents.middleware import AgentMiddleware, HumanInTheLoopMiddleware
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.runtime import Runtime

import threadkeeper

RECORDS = {"r1": "Ada Lovelace, account opened 1843", "r2": "Alan Turing, account opened 1936"}


@tool
def lookup_record(record_id: str) -> str:
    """Read one customer record by id (safe: changes nothing)."""
    return RECORDS.get(record_id, f"no record {record_id}")


@tool
def delete_record(record_id: str) -> str:
    """Delete one customer record by id (needs a human's approval)."""
    return f"deleted {record_id}" if RECORDS.pop(record_id, None) else f"no record {record_id}"


class CountedState(AgentState):
    model_calls: NotRequired[int]


class CallCounter(AgentMiddleware[CountedState]):
    """The graph's own middleware: counts model calls in the thread's state."""

    state_schema = CountedState

    def after_model(self, state: CountedState, runtime: Runtime[Any]) -> dict[str, Any]:
        return {"model_calls": state.get("model_calls", 0) + 1}


agent = create_agent(
    model=ChatOpenAI(
        base_url=os.environ.get("OPENAI_BASE_URL") or None,
        api_key=os.environ.get("OPENAI_API_KEY") or "not-needed",  # type: ignore[arg-type]
        model=os.environ.get("RECORDS_MODEL", "gpt-4o-mini"),
        max_retries=0,
    ),
    tools=[lookup_record, delete_record],
    system_prompt="You manage customer records. Look records up before changing them.",
    middleware=[
        threadkeeper.CompressionMiddleware(),
        CallCounter(),
        HumanInTheLoopMiddleware(interrupt_on={"delete_record": True}),
    ],
)
