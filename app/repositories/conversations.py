"""Conversation (thread) aggregate: all of its SQL, including THE per-thread row lock."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, delete, func, or_, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import (
    ACTIVE_RUN_STATUSES,
    AgentRun,
    AgentRunRequest,
    Conversation,
    RequestStatus,
    RunStatus,
)
from app.domain.errors import NotFound
from app.domain.states import ThreadStatus
from app.repositories.locking import lock_errors_as_busy

_THREAD_STATUS_OF_ACTIVE_RUN: dict[RunStatus, ThreadStatus] = {
    RunStatus.RUNNING: "running",
    RunStatus.INTERRUPTED: "interrupted",
}
#: Thread statuses that mean "a run is active" (the thread cannot be deleted).
ACTIVE_THREAD_STATUSES: frozenset[ThreadStatus] = frozenset(_THREAD_STATUS_OF_ACTIVE_RUN.values())


class ConversationRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def create(
        self,
        *,
        owner_id: str,
        agent_id: str,
        title: str,
        metadata: dict[str, Any] | None = None,
        thread_id: uuid.UUID | None = None,
    ) -> Conversation:
        """``thread_id``: a client-chosen id (the LangGraph surface); taken ids fail on the key."""
        conv = Conversation(
            id=thread_id or uuid.uuid4(),
            owner_id=owner_id,
            agent_id=agent_id,
            title=title,
            meta=metadata or {},
        )
        self.session.add(conv)
        await self.session.flush()
        await self.session.refresh(conv)
        return conv

    async def get_owned(self, thread_id: uuid.UUID, owner_id: str) -> Conversation:
        """Another owner's thread is indistinguishable from a missing one (404, not 403)."""
        conv = await self.session.scalar(
            select(Conversation).where(
                Conversation.id == thread_id,
                Conversation.owner_id == owner_id,
            )
        )
        if conv is None:
            raise NotFound(f"thread {thread_id} not found")
        return conv

    async def get(self, thread_id: uuid.UUID) -> Conversation | None:
        return await self.session.get(Conversation, thread_id)

    async def list_owned(
        self,
        owner_id: str,
        *,
        limit: int,
        before: tuple[object, uuid.UUID] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Sequence[Conversation]:
        """Newest first, keyset-paginated on (created_at, id); ``metadata``: JSONB containment."""
        stmt = select(Conversation).where(Conversation.owner_id == owner_id)
        if metadata:
            stmt = stmt.where(Conversation.meta.contains(metadata))
        if before is not None:
            created, thread_id = before
            stmt = stmt.where(
                or_(
                    Conversation.created_at < created,
                    and_(Conversation.created_at == created, Conversation.id < thread_id),
                )
            )
        stmt = stmt.order_by(Conversation.created_at.desc(), Conversation.id.desc()).limit(limit)
        return (await self.session.scalars(stmt)).all()

    async def search_owned(
        self,
        owner_id: str,
        *,
        metadata: dict[str, Any] | None,
        ids: Sequence[uuid.UUID] | None,
        limit: int,
        offset: int,
        sort_by: str = "created_at",
        descending: bool = True,
    ) -> Sequence[Conversation]:
        """Offset-paginated search (the LangGraph surface): JSONB containment, optional ids,
        sorted by ``created_at`` / ``updated_at`` / ``thread_id``."""
        column = {
            "created_at": Conversation.created_at,
            "updated_at": Conversation.updated_at,
            "thread_id": Conversation.id,
        }[sort_by]
        stmt = self._owned_filter(select(Conversation), owner_id, metadata, ids)
        order = column.desc() if descending else column.asc()
        stmt = stmt.order_by(order, Conversation.id.desc()).limit(limit).offset(offset)
        return (await self.session.scalars(stmt)).all()

    async def count_owned(
        self,
        owner_id: str,
        *,
        metadata: dict[str, Any] | None,
        ids: Sequence[uuid.UUID] | None = None,
    ) -> int:
        stmt = self._owned_filter(select(func.count(Conversation.id)), owner_id, metadata, ids)
        return int(await self.session.scalar(stmt) or 0)

    @staticmethod
    def _owned_filter(
        stmt: Any,
        owner_id: str,
        metadata: dict[str, Any] | None,
        ids: Sequence[uuid.UUID] | None,
    ) -> Any:
        stmt = stmt.where(Conversation.owner_id == owner_id)
        if metadata:
            stmt = stmt.where(Conversation.meta.contains(metadata))
        if ids is not None:
            stmt = stmt.where(Conversation.id.in_(list(ids)))
        return stmt

    async def lock(
        self, thread_id: uuid.UUID, *, owner_id: str | None = None, timeout_ms: int = 5000
    ) -> Conversation:
        """``SELECT ... FOR UPDATE`` the thread row: the mutex shared by intake, claim and compress.

        Waits at most ``timeout_ms``; a lock still held then becomes ThreadBusy.
        """
        await self.session.execute(text(f"SET LOCAL lock_timeout = {int(timeout_ms)}"))
        stmt = select(Conversation).where(Conversation.id == thread_id)
        if owner_id is not None:
            stmt = stmt.where(Conversation.owner_id == owner_id)
        async with lock_errors_as_busy("the thread is locked by another operation"):
            conv = await self.session.scalar(
                stmt.with_for_update().execution_options(populate_existing=True)
            )
        if conv is None:
            raise NotFound(f"thread {thread_id} not found")
        return conv

    async def allocate_message_seqs(self, thread_id: uuid.UUID, count: int) -> int:
        """Reserve ``count`` consecutive message sequence numbers; returns the first."""
        first = await self.session.scalar(
            update(Conversation)
            .where(Conversation.id == thread_id)
            .values(next_message_seq=Conversation.next_message_seq + count, updated_at=func.now())
            .returning(Conversation.next_message_seq - count)
        )
        if first is None:
            raise NotFound(f"thread {thread_id} not found")
        return int(first)

    async def update(self, thread_id: uuid.UUID, **values: Any) -> Conversation:
        """Set columns (``title``, ``meta``) of a row the caller has locked; returns it fresh."""
        await self.session.execute(
            update(Conversation)
            .where(Conversation.id == thread_id)
            .values(**values, updated_at=func.now())
        )
        conv = await self.session.get(Conversation, thread_id, populate_existing=True)
        if conv is None:
            raise NotFound(f"thread {thread_id} not found")
        return conv

    async def statuses(self, thread_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, ThreadStatus]:
        """THE answer to "is the thread busy" (anything but ``idle`` is busy): per thread, its
        active run's status first (a queued input waits behind it), else ``queued`` when input
        waits, else ``idle``."""
        if not thread_ids:
            return {}
        ids = list(thread_ids)
        result: dict[uuid.UUID, ThreadStatus] = dict.fromkeys(ids, "idle")
        queued = await self.session.scalars(
            select(AgentRunRequest.thread_id)
            .where(
                AgentRunRequest.thread_id.in_(ids),
                AgentRunRequest.status == RequestStatus.QUEUED,
            )
            .distinct()
        )
        for thread_id in queued:
            result[thread_id] = "queued"
        active = await self.session.execute(
            select(AgentRun.thread_id, AgentRun.status).where(
                AgentRun.thread_id.in_(ids), AgentRun.status.in_(ACTIVE_RUN_STATUSES)
            )
        )
        for thread_id, status in active:
            result[thread_id] = _THREAD_STATUS_OF_ACTIVE_RUN[status]
        return result

    async def status(self, thread_id: uuid.UUID) -> ThreadStatus:
        return (await self.statuses([thread_id]))[thread_id]

    async def delete(self, thread_id: uuid.UUID) -> None:
        await self.session.execute(delete(Conversation).where(Conversation.id == thread_id))
