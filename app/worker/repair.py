"""A run that ended between a tool call and its committed result leaves a history no provider
accepts: answer such calls before the thread goes on.

Read from the committed checkpoint (new input would discard anything after it). A tool that did
finish keeps its real result: the one the full history already stored (the step's update is
written as soon as it streams, while LangGraph still writes its checkpoint in the background), or
else the pending write of its task; otherwise the answer says why there is none
(``repair_content``). A result the history holds is not stored again.
"""

from __future__ import annotations

import uuid

import structlog
from langchain_core.messages import ToolMessage

from app.agents.middlewares.boundary import (
    NOT_APPROVED,
    RESULT_UNKNOWN,
    SUPERSEDED_CALL,
    dangling_tool_calls,
    unanswered_result,
)
from app.compression.storable import storable_message
from app.repositories.agent_state import AgentStateRepository, AgentStateSnapshot
from app.worker.ledger import RunLedger

log = structlog.get_logger(__name__)


def repair_content(live: AgentStateSnapshot, superseded: bool = False) -> str:
    """Why a dangling tool call has no result: it waited for approval when its run was
    cancelled, or superseded by new input (the tool never ran), or its run ended with the tool
    running or done but its result not recorded (``kill -9``, a lost lease): then the tool may
    have run."""
    if not live.interrupts:
        return RESULT_UNKNOWN
    return SUPERSEDED_CALL if superseded else NOT_APPROVED


def recovered_result(result: ToolMessage, call_id: str) -> ToolMessage:
    """A finished tool's saved result, with the one id every repair of this call uses."""
    return storable_message(result).model_copy(update={"id": f"repair-{call_id}"})


async def repair_dangling_tool_calls(
    state: AgentStateRepository,
    ledger: RunLedger,
    thread_id: uuid.UUID,
    run_id: uuid.UUID,
    *,
    superseded: bool = False,
) -> None:
    """``superseded``: the thread's previous run was ended by new input while it waited."""
    live, committed = await state.get_live_and_committed(thread_id)
    pending = dangling_tool_calls(committed.messages)
    if not pending:
        return
    stored = await ledger.stored_tool_results(thread_id, [p["id"] for p in pending])
    finished = {m.tool_call_id: m for m in live.messages if isinstance(m, ToolMessage)}
    patch = [
        stored.get(p["id"])
        or (
            recovered_result(finished[p["id"]], p["id"])
            if p["id"] in finished
            else unanswered_result(p, repair_content(live, superseded))
        )
        for p in pending
    ]
    log.warning(
        "dangling_tool_calls_answered",
        run_id=str(run_id),
        recovered=sum(p["id"] in finished or p["id"] in stored for p in pending),
        unknown=sum(p["id"] not in finished and p["id"] not in stored for p in pending),
    )
    # Full history first (what it lacks, announced: a follower's stream shows the answers
    # before the run's own), then the model view.
    await ledger.write_step(thread_id, run_id, [m for m in patch if m.tool_call_id not in stored])
    await state.add_tool_results(thread_id, patch)
