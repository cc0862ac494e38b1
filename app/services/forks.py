"""Where a run from an earlier checkpoint forks a thread (issue 36: Edit, Regenerate).

A client names a checkpoint of the thread (LangGraph's ``checkpoint``; /v1 names a message and
the checkpoint is the one Agent Chat UI would send): before a run's input (Edit: new input
there), a run's input applied (Regenerate: run the answer again, no input), or a run's end
(new input there). Anything else is ``checkpoint_not_forkable``; a checkpoint the thread does
not have is ``checkpoint_not_found``. The fork point in the chat is the checkpoint's last
message found in PostgreSQL: the new branch keeps that message's branch up to it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Message
from app.domain.errors import CheckpointNotForkable, CheckpointNotFound
from app.repositories.agent_state import AgentStateRepository, AgentStateSnapshot
from app.repositories.messages import MessageRepository

#: A checkpoint made before a run's input (LangGraph's ``metadata.source``).
INPUT_SOURCE = "input"


@dataclass(frozen=True, slots=True)
class ForkAsk:
    """A run from an earlier checkpoint: with ``content`` (Edit) or without (Regenerate)."""

    checkpoint_id: str
    content: str | None
    agent_id: str | None = None
    lc_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return "regenerate" if self.content is None else "edit"


@dataclass(frozen=True, slots=True)
class ForkPoint:
    checkpoint_id: str
    #: The branch and seq of the last message the new branch keeps (None, 0: none).
    branch_id: uuid.UUID | None
    seq: int
    #: Regenerate: the question answered again (the checkpoint's last message).
    question: Message | None = None


def is_turn_boundary(snapshot: AgentStateSnapshot, parent: AgentStateSnapshot | None) -> bool:
    """Before a run's input, its input applied (the child of an input checkpoint), or a run's
    end (nothing next)."""
    if snapshot.source == INPUT_SOURCE or not snapshot.next:
        return True
    return parent is not None and parent.source == INPUT_SOURCE


async def fork_point(
    session: AsyncSession, states: AgentStateRepository, thread_id: uuid.UUID, ask: ForkAsk
) -> ForkPoint:
    """The fork point of ``ask`` on the thread, or the refusal."""
    snapshot = await states.at(thread_id, ask.checkpoint_id)
    if snapshot is None:
        raise CheckpointNotFound(f"thread {thread_id} has no checkpoint {ask.checkpoint_id!r}")
    parent = (
        await states.at(thread_id, snapshot.parent_checkpoint_id)
        if snapshot.parent_checkpoint_id
        else None
    )
    if not is_turn_boundary(snapshot, parent):
        raise CheckpointNotForkable(
            "a run may start only from a turn boundary: before a run's input, its input "
            "applied, or a run's end (threads/{id}/history lists them)"
        )
    ids = [str(m.id) for m in snapshot.messages if m.id]
    found = await MessageRepository(session).by_lc_ids(thread_id, ids)
    last = next((found[i] for i in reversed(ids) if i in found), None)
    answerable = last is not None and last.role == "user" and ids[-1] == last.lc_id
    if ask.content is None and not (snapshot.next and answerable):
        raise CheckpointNotForkable(
            "a run without input re-runs an answer: name the checkpoint where its question "
            "was applied (the parent of the state where the answer first appeared)"
        )
    if last is None:
        return ForkPoint(ask.checkpoint_id, None, 0)
    return ForkPoint(
        ask.checkpoint_id, last.branch_id, last.seq, last if ask.content is None else None
    )
