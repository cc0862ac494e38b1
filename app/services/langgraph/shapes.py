"""Threadkeeper rows as LangGraph Agent Server JSON (messages, threads, runs, interrupts)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

import msgspec

from app.db.models import AgentRun, AgentRunRequest, Message, RequestStatus, RunStatus
from app.db.run_events import hitl_request

LangGraphRunStatus = Literal["pending", "running", "success", "error", "interrupted"]
LangGraphThreadStatus = Literal["idle", "busy", "interrupted", "error"]

#: The agent's nodes as LangGraph names them (langchain's create_agent): what the tuple
#: metadata and ``updates`` name.
MODEL_NODE = "model"
TOOLS_NODE = "tools"


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def message_json(m: Message) -> dict[str, Any]:
    """A persisted message as a serialized LangChain message (``type`` human / ai / tool)."""
    base: dict[str, Any] = {
        "content": m.content,
        "additional_kwargs": {},
        "response_metadata": {},
        "id": m.lc_id or str(m.id),
        "name": None,
    }
    if m.role == "user":
        return {**base, "type": "human"}
    if m.role == "tool":
        return {
            **base,
            "type": "tool",
            "name": m.tool_name,
            "tool_call_id": m.tool_call_id,
            "status": "success",
        }
    calls = [
        {"name": c.get("name"), "args": c.get("args") or {}, "id": c.get("id"), "type": "tool_call"}
        for c in (m.tool_calls or [])
    ]
    return {
        **base,
        "type": "ai",
        "tool_calls": calls,
        "invalid_tool_calls": [],
        "usage_metadata": None,
    }


def messages_json(rows: Sequence[Message], withdrawn: set[uuid.UUID]) -> list[dict[str, Any]]:
    """The full history a chat UI shows (withdrawn input, which never ran, left out)."""
    return [message_json(m) for m in rows if m.request_id not in withdrawn or m.role != "user"]


def chunk_json(lc_id: str | None, text: str) -> dict[str, Any]:
    """A streamed token delta as LangChain's serialized AIMessageChunk."""
    return {
        "content": text,
        "additional_kwargs": {},
        "response_metadata": {},
        "type": "AIMessageChunk",
        "name": None,
        "id": lc_id,
        "tool_calls": [],
        "invalid_tool_calls": [],
        "tool_call_chunks": [],
        "usage_metadata": None,
    }


def node_of(role: str) -> str:
    return TOOLS_NODE if role == "tool" else MODEL_NODE


def interrupt_json(value: Any, interrupt_id: str) -> dict[str, Any]:
    """LangGraph's Interrupt: the HITLRequest (``action_requests``, ``review_configs``), in the
    one typed shape the run's events store, whether read from the run row or an event."""
    typed = hitl_request(value)
    return {"value": value if typed is None else msgspec.to_builtins(typed), "id": interrupt_id}


def run_status(request: AgentRunRequest, run: AgentRun | None) -> LangGraphRunStatus:
    """A queued request is a pending run; a run stopped for approval ended ``success`` (its
    thread is ``interrupted``), as LangGraph's server reports it; cancelled is ``interrupted``."""
    if request.status == RequestStatus.QUEUED:
        return "pending"
    if request.status == RequestStatus.CANCELLED or run is None:
        return "interrupted" if request.status == RequestStatus.CANCELLED else "pending"
    return agent_run_status(run)


def agent_run_status(run: AgentRun) -> LangGraphRunStatus:
    return {
        RunStatus.RUNNING: "running",
        RunStatus.INTERRUPTED: "success",
        RunStatus.COMPLETED: "success",
        RunStatus.FAILED: "error",
        RunStatus.CANCELLED: "interrupted",
    }[run.status]  # type: ignore[return-value]


def run_failure(run: AgentRun | None) -> dict[str, Any]:
    """The ``threadkeeper`` key of a LangGraph run: why it failed (null fields otherwise), the
    same declared fields as /v1's Run (``error_code``, ``provider_status``, ``provider_code``)."""
    return {
        "error_code": run.error_code if run is not None else None,
        "provider_status": run.provider_status if run is not None else None,
        "provider_code": run.provider_code if run is not None else None,
    }


def run_json(
    run_id: uuid.UUID,
    thread_id: uuid.UUID,
    assistant_id: str,
    status: LangGraphRunStatus,
    created_at: datetime,
    updated_at: datetime | None,
    failure: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "run_id": str(run_id),
        "thread_id": str(thread_id),
        "assistant_id": assistant_id,
        "created_at": iso(created_at),
        "updated_at": iso(updated_at or created_at),
        "status": status,
        "metadata": {},
        "kwargs": {},
        "multitask_strategy": "enqueue",
        "threadkeeper": failure or run_failure(None),
    }


def thread_status(view_status: str, last_run_failed: bool) -> LangGraphThreadStatus:
    """idle | busy (running or queued input) | interrupted | error (the last run failed)."""
    if view_status in ("running", "queued"):
        return "busy"
    if view_status == "interrupted":
        return "interrupted"
    return "error" if last_run_failed else "idle"
