"""A thread's branches (``thread_branches``): its chat as a tree, never rewritten.

A branch's chat is its own messages after its ancestors' up to each fork point
(``Lineage``: per branch on the way to the root, the last seq it contributes); the root is the
thread's first branch (``branch_id`` NULL in the rows, the thread's id in the API).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import ColumnElement, and_, false, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Conversation, Message, ThreadBranch


@dataclass(frozen=True, slots=True)
class Lineage:
    """``(branch id or None for the root, last seq it contributes or None for all)`` from the
    branch itself to the root."""

    steps: tuple[tuple[uuid.UUID | None, int | None], ...]

    def holds(self, message: Message) -> bool:
        for branch_id, last in self.steps:
            if message.branch_id == branch_id:
                return last is None or message.seq <= last
        return False

    def where(self) -> ColumnElement[bool]:
        """The messages of the branch's chat, as a SQL condition."""
        terms = []
        for branch_id, last in self.steps:
            own = (
                Message.branch_id.is_(None) if branch_id is None else Message.branch_id == branch_id
            )
            terms.append(own if last is None else and_(own, Message.seq <= last))
        return or_(*terms) if terms else false()


def lineage_of(branches: Sequence[ThreadBranch], branch_id: uuid.UUID | None) -> Lineage:
    """The lineage of ``branch_id`` among a thread's ``branches`` (None: the root)."""
    by_id = {b.id: b for b in branches}
    steps: list[tuple[uuid.UUID | None, int | None]] = []
    last: int | None = None
    current = branch_id
    while current is not None:
        branch = by_id[current]
        steps.append((current, last))
        last = branch.fork_seq if last is None else min(last, branch.fork_seq)
        current = branch.parent_id
    steps.append((None, last))
    return Lineage(tuple(steps))


class BranchRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def list(self, thread_id: uuid.UUID) -> Sequence[ThreadBranch]:
        """The thread's branches, oldest first (its first branch is not a row)."""
        return (
            await self.session.scalars(
                select(ThreadBranch)
                .where(ThreadBranch.thread_id == thread_id)
                .order_by(ThreadBranch.created_at, ThreadBranch.id)
            )
        ).all()

    async def lineage(self, thread_id: uuid.UUID, branch_id: uuid.UUID | None) -> Lineage:
        if branch_id is None:
            return Lineage(((None, None),))
        return lineage_of(await self.list(thread_id), branch_id)

    async def current(self, thread_id: uuid.UUID) -> uuid.UUID | None:
        return await self.session.scalar(
            select(Conversation.branch_id).where(Conversation.id == thread_id)
        )

    async def fork(
        self,
        thread_id: uuid.UUID,
        *,
        parent_id: uuid.UUID | None,
        fork_seq: int,
        checkpoint_id: str,
        kind: str,
    ) -> ThreadBranch:
        """A new branch, made the thread's current one (the caller holds the row lock)."""
        branch = ThreadBranch(
            id=uuid.uuid4(),
            thread_id=thread_id,
            parent_id=parent_id,
            fork_seq=fork_seq,
            checkpoint_id=checkpoint_id,
            kind=kind,
        )
        self.session.add(branch)
        await self.session.flush()
        await self.session.execute(
            update(Conversation).where(Conversation.id == thread_id).values(branch_id=branch.id)
        )
        return branch

    async def note_request(self, branch: ThreadBranch, request_id: uuid.UUID) -> None:
        branch.request_id = request_id
        await self.session.flush()
