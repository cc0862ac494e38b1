"""A thread's history as LangGraph clients read it (``threads/{id}/history``, ``state/{id}``):
the checkpoints a client can branch from, newest first, each with the chat as it stood there.

The checkpoints come from the thread's agent graph (``aget_state_history``: agent state is read
only through the compiled graph); the worker's prune keeps the turn boundaries and branch heads
(app/db/checkpoint_prune.py). A checkpoint holds the model's view, which compression shrinks;
``values.messages`` is the full chat from PostgreSQL up to the checkpoint's last message there
(what a chat UI shows, and what Agent Chat UI finds a message's first state by).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.db.models import Message
from app.repositories.agent_state import AgentStateSnapshot
from app.services.langgraph.shapes import message_json


def chat_at(chat: Sequence[Message], snapshot: AgentStateSnapshot) -> list[Message]:
    """``chat`` (a branch's full chat, in order) up to the last of ``snapshot``'s messages it
    holds: the chat as it stood at that checkpoint (nothing when none of them is there)."""
    where = {m.lc_id or str(m.id): i for i, m in enumerate(chat)}
    for message in reversed(snapshot.messages):
        index = where.get(str(message.id)) if message.id else None
        if index is not None:
            return list(chat[: index + 1])
    return []


def checkpoint_json(thread_id: str, checkpoint_id: str | None) -> dict[str, Any]:
    return {
        "thread_id": thread_id,
        "checkpoint_ns": "",
        "checkpoint_id": checkpoint_id,
        "checkpoint_map": None,
    }


def task_json(task: Any) -> dict[str, Any]:
    """A LangGraph ``PregelTask`` as the Agent Server API shows it."""
    error = getattr(task, "error", None)
    return {
        "id": str(task.id),
        "name": str(task.name),
        "path": [str(p) for p in getattr(task, "path", ()) or ()],
        "error": None if error is None else repr(error),
        "interrupts": [
            {"value": getattr(i, "value", None), "id": str(getattr(i, "id", ""))}
            for i in getattr(task, "interrupts", ()) or ()
        ],
        "checkpoint": None,
        "state": None,
        "result": None,
    }


def past_state_json(
    thread_id: str,
    snapshot: AgentStateSnapshot,
    chat: Sequence[Message],
    metadata: dict[str, Any],
) -> dict[str, Any]:
    """An earlier checkpoint's state (the head's is the thread's state, with Threadkeeper's
    extras): its values with the chat as it stood there, LangGraph's own next and tasks."""
    return {
        "values": {**snapshot.values, "messages": [message_json(m) for m in chat]},
        "next": list(snapshot.next),
        "tasks": [task_json(t) for t in snapshot.tasks],
        "checkpoint": checkpoint_json(thread_id, snapshot.checkpoint_id),
        "parent_checkpoint": (
            checkpoint_json(thread_id, snapshot.parent_checkpoint_id)
            if snapshot.parent_checkpoint_id
            else None
        ),
        "metadata": {
            **metadata,
            "source": snapshot.source,
            "step": snapshot.metadata.get("step"),
            "parents": snapshot.metadata.get("parents") or {},
        },
        "created_at": snapshot.created_at,
        "interrupts": [i for t in snapshot.tasks for i in task_json(t)["interrupts"]],
    }
