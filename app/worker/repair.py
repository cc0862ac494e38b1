"""A run that died between a tool call and its result leaves a history no provider accepts:
answer such calls with an explicit 'not executed' result before the thread goes on."""

from __future__ import annotations

import uuid
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage

from app.repositories.agent_state import AgentStateRepository
from app.worker.ledger import RunLedger


def dangling_tool_calls(messages: list[AnyMessage]) -> list[dict[str, Any]]:
    """Tool calls of AI messages that never got a ToolMessage (a run died between the two)."""
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    pending: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, AIMessage):
            for call in m.tool_calls:
                if call.get("id") and call["id"] not in answered:
                    pending.append({"id": call["id"], "name": call["name"]})
    return pending


def not_executed(pending: list[dict[str, Any]]) -> list[ToolMessage]:
    return [
        ToolMessage(
            content="Not executed: the run that requested this tool call ended first.",
            tool_call_id=p["id"],
            name=p["name"],
            status="error",
            id=f"repair-{p['id']}",  # one repair per tool call, however often retried
        )
        for p in pending
    ]


async def repair_dangling_tool_calls(
    state: AgentStateRepository, ledger: RunLedger, thread_id: uuid.UUID, run_id: uuid.UUID
) -> None:
    snapshot = await state.get(thread_id)
    pending = dangling_tool_calls(snapshot.messages)
    if not pending:
        return
    patch = not_executed(pending)
    # Full history first (idempotent on the ids), then the model view.
    await ledger.store_messages(thread_id, run_id, patch)
    await state.add_tool_results(thread_id, patch)
