"""LangGraph's run and thread statuses, from Threadkeeper's (one mapping, both read by the
use cases and shown by the presenters in ``app/api/langgraph``)."""

from __future__ import annotations

from typing import Literal

from app.db.models import AgentRun, AgentRunRequest, RequestStatus, RunStatus

LangGraphRunStatus = Literal["pending", "running", "success", "error", "interrupted"]
LangGraphThreadStatus = Literal["idle", "busy", "interrupted", "error"]


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


def thread_status(view_status: str, last_run_failed: bool) -> LangGraphThreadStatus:
    """idle | busy (running or queued input) | interrupted | error (the last run failed)."""
    if view_status in ("running", "queued"):
        return "busy"
    if view_status == "interrupted":
        return "interrupted"
    return "error" if last_run_failed else "idle"
