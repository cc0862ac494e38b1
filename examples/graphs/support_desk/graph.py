"""A hand-built LangGraph graph served by Threadkeeper as it is (``langgraph.json`` beside it).

router -> retrieve (the agent's knowledge base) -> respond, with an ``interrupt()`` approval
before a refund is promised and state keys of its own (``route``, ``documents``,
``approved``). The model call goes through Threadkeeper's compression
(``compressed_model_call``): the agent's one ``summary_threshold``, offloads, summaries, manual
compression. The same file runs under ``langgraph dev``, where ``threadkeeper`` passes the call
through and the knowledge base is empty.

The model is any OpenAI-compatible endpoint: ``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and
``SUPPORT_DESK_MODEL`` (the ``.env`` beside this file names the defaults).
"""

from __future__ import annotations

import os
from typing import Any

from langchain_core.messages import AnyMessage, HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt

import threadkeeper


class DeskState(MessagesState, total=False):
    route: str
    documents: list[dict[str, Any]]
    approved: bool | None


def _model() -> ChatOpenAI:
    return ChatOpenAI(
        base_url=os.environ.get("OPENAI_BASE_URL") or None,
        api_key=os.environ.get("OPENAI_API_KEY") or "not-needed",  # type: ignore[arg-type]
        model=os.environ.get("SUPPORT_DESK_MODEL", "gpt-4o-mini"),
        max_retries=0,
    )


def _question(messages: list[AnyMessage]) -> str:
    humans = [m for m in messages if isinstance(m, HumanMessage)]
    return str(humans[-1].content) if humans else ""


def router(state: DeskState) -> dict[str, Any]:
    question = _question(state["messages"]).lower()
    route = "refund" if "refund" in question else "kb"
    get_stream_writer()({"stage": "routed", "route": route})
    return {"route": route}


async def retrieve(state: DeskState) -> dict[str, Any]:
    found = await threadkeeper.search_knowledge_base(_question(state["messages"]), limit=3)
    documents = [
        {"title": r.get("title"), "text": r.get("content") or ""} for r in found.get("results", [])
    ]
    get_stream_writer()({"stage": "retrieved", "documents": len(documents)})
    return {"documents": documents}


def approve(state: DeskState) -> dict[str, Any]:
    answer = interrupt({"question": "Promise a refund to this customer?", "route": "refund"})
    approved = answer is True or (isinstance(answer, dict) and answer.get("approved") is True)
    return {"approved": approved}


async def respond(state: DeskState) -> dict[str, Any]:
    notes = "\n".join(f"- {d['title']}: {d['text']}" for d in state.get("documents") or [])
    system = "You are a support desk. Answer from these notes:\n" + (notes or "(none)")
    if state.get("route") == "refund":
        system += "\nA refund was " + ("approved." if state.get("approved") else "refused.")
    update = await threadkeeper.compressed_model_call(
        _model(), state["messages"], system_message=system
    )
    return {"messages": update}


def _after_router(state: DeskState) -> str:
    return "approve" if state.get("route") == "refund" else "retrieve"


builder = StateGraph(DeskState)
builder.add_node("router", router)
builder.add_node("retrieve", retrieve)
builder.add_node("approve", approve)
builder.add_node("respond", respond)
builder.add_edge(START, "router")
builder.add_conditional_edges("router", _after_router, ["approve", "retrieve"])
builder.add_edge("approve", "respond")
builder.add_edge("retrieve", "respond")
builder.add_edge("respond", END)

#: Uncompiled: Threadkeeper (like LangGraph's server) compiles it with its checkpointer.
graph = builder
