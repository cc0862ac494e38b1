"""A thread's history as LangGraph clients read it (``threads/{id}/history``, ``state/{id}``):
the checkpoints a client can branch from, newest first, each with the chat as it stood there.

The checkpoints come from the thread's agent graph (``aget_state_history``: agent state is read
only through the compiled graph); the worker's prune keeps the turn boundaries and branch heads
(app/db/checkpoint_prune.py). A checkpoint holds the model's view, which compression shrinks;
``values.messages`` is the full chat from PostgreSQL up to the checkpoint's last message there
(what a chat UI shows, and what Agent Chat UI finds a message's first state by). The API
presents them (``app/api/langgraph/presenters.past_state_out``).
"""

from __future__ import annotations

from collections.abc import Sequence

from app.db.models import Message
from app.repositories.agent_state import AgentStateSnapshot


def chat_at(chat: Sequence[Message], snapshot: AgentStateSnapshot) -> list[Message]:
    """``chat`` (a branch's full chat, in order) up to the last of ``snapshot``'s messages it
    holds: the chat as it stood at that checkpoint (nothing when none of them is there)."""
    where = {m.lc_id or str(m.id): i for i, m in enumerate(chat)}
    for message in reversed(snapshot.messages):
        index = where.get(str(message.id)) if message.id else None
        if index is not None:
            return list(chat[: index + 1])
    return []
