"""Conversation (thread) aggregate: all of its SQL, including THE per-thread row lock."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, case, delete, exists, func, literal, or_, select, text, update
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


@dataclass(frozen=True, slots=True)
class StatusFilter:
    """Threads in one of ``statuses``; ``last_run_failed`` True/False: whose latest run did or
    did not fail (None: either)."""

    statuses: tuple[ThreadStatus, ...]
    last_run_failed: bool | None = None


def _status_expression() -> Any:
    """The thread's status as SQL over its row (one correlated lookup per partial index)."""
    active = (
        select(AgentRun.status)
        .where(AgentRun.thread_id == Conversation.id, AgentRun.status.in_(ACTIVE_RUN_STATUSES))
        .limit(1)
        .scalar_subquery()
    )
    queued = exists().where(
        AgentRunRequest.thread_id == Conversation.id,
        AgentRunRequest.status == RequestStatus.QUEUED,
    )
    return case(
        (active == RunStatus.RUNNING, literal("running")),
        (active == RunStatus.INTERRUPTED, literal("interrupted")),
        (queued, literal("queued")),
        else_=literal("idle"),
    )


def _last_run_status() -> Any:
    return (
        select(AgentRun.status)
        .where(AgentRun.thread_id == Conversation.id)
        .order_by(AgentRun.created_at.desc(), AgentRun.id)
        .limit(1)
        .scalar_subquery()
    )


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
        agent_bound: bool = True,
    ) -> Conversation:
        """``thread_id``: a client-chosen id (the LangGraph surface); taken ids fail on the key.
        ``agent_bound`` False: the agent is not chosen yet (the first run chooses it)."""
        conv = Conversation(
            id=thread_id or uuid.uuid4(),
            owner_id=owner_id,
            agent_id=agent_id,
            agent_bound=agent_bound,
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
        agent_id: str | None = None,
        status: StatusFilter | None = None,
    ) -> Sequence[Conversation]:
        """Offset-paginated search (the LangGraph surface): JSONB containment, optional ids,
        the (chosen) agent and the status, all in the one query; sorted by ``created_at`` /
        ``updated_at`` / ``thread_id``."""
        column = {
            "created_at": Conversation.created_at,
            "updated_at": Conversation.updated_at,
            "thread_id": Conversation.id,
        }[sort_by]
        stmt = self._owned_filter(select(Conversation), owner_id, metadata, ids, agent_id, status)
        order = column.desc() if descending else column.asc()
        stmt = stmt.order_by(order, Conversation.id.desc()).limit(limit).offset(offset)
        return (await self.session.scalars(stmt)).all()

    async def count_owned(
        self,
        owner_id: str,
        *,
        metadata: dict[str, Any] | None,
        ids: Sequence[uuid.UUID] | None = None,
        agent_id: str | None = None,
        status: StatusFilter | None = None,
    ) -> int:
        stmt = self._owned_filter(
            select(func.count(Conversation.id)), owner_id, metadata, ids, agent_id, status
        )
        return int(await self.session.scalar(stmt) or 0)

    @staticmethod
    def _owned_filter(
        stmt: Any,
        owner_id: str,
        metadata: dict[str, Any] | None,
        ids: Sequence[uuid.UUID] | None,
        agent_id: str | None = None,
        status: StatusFilter | None = None,
    ) -> Any:
        stmt = stmt.where(Conversation.owner_id == owner_id)
        if metadata:
            stmt = stmt.where(Conversation.meta.contains(metadata))
        if ids is not None:
            stmt = stmt.where(Conversation.id.in_(list(ids)))
        if agent_id is not None:
            stmt = stmt.where(Conversation.agent_id == agent_id, Conversation.agent_bound)
        if status is not None:
            stmt = stmt.where(_status_expression().in_(list(status.statuses)))
            if status.last_run_failed is not None:
                failed = _last_run_status() == RunStatus.FAILED
                stmt = stmt.where(failed if status.last_run_failed else ~failed.is_(True))
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

    async def allocate_message_seqs(
        self, thread_id: uuid.UUID, count: int
    ) -> tuple[int, uuid.UUID | None]:
        """Reserve ``count`` consecutive message sequence numbers; returns the first, and the
        thread's current branch (where new messages go)."""
        row = (
            await self.session.execute(
                update(Conversation)
                .where(Conversation.id == thread_id)
                .values(
                    next_message_seq=Conversation.next_message_seq + count, updated_at=func.now()
                )
                .returning(Conversation.next_message_seq - count, Conversation.branch_id)
            )
        ).first()
        if row is None:
            raise NotFound(f"thread {thread_id} not found")
        return int(row[0]), row[1]

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
        waits, else ``idle`` (``_status_expression``, which search filters on too)."""
        if not thread_ids:
            return {}
        rows = await self.session.execute(
            select(Conversation.id, _status_expression()).where(
                Conversation.id.in_(list(thread_ids))
            )
        )
        found: dict[uuid.UUID, ThreadStatus] = {t: s for t, s in rows}
        return {t: found.get(t, "idle") for t in thread_ids}

    async def last_runs_failed(self, thread_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """The threads whose latest run failed."""
        if not thread_ids:
            return set()
        rows = await self.session.scalars(
            select(Conversation.id).where(
                Conversation.id.in_(list(thread_ids)), _last_run_status() == RunStatus.FAILED
            )
        )
        return set(rows)

    async def status(self, thread_id: uuid.UUID) -> ThreadStatus:
        return (await self.statuses([thread_id]))[thread_id]

    async def delete(self, thread_id: uuid.UUID) -> None:
        await self.session.execute(delete(Conversation).where(Conversation.id == thread_id))
