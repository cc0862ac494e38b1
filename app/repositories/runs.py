"""Run requests (the per-thread FIFO) and runs, read and locked. A run's status has one writer,
the run state machine in app/repositories/run_leases.py."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import func, select, text, update
from sqlalchemy.dialects.postgresql import distinct_on
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import (
    AgentRun,
    AgentRunRequest,
    Conversation,
    RequestStatus,
)
from app.domain.errors import NotFound
from app.repositories.locking import lock_errors_as_busy
from app.repositories.run_events import RUN_EVENTS_CHANNEL

#: LISTEN/NOTIFY channel that wakes workers in other processes: a thread may have become
#: claimable (a message queued on an idle thread, a run resumed). Polling stays the fallback.
WORK_CHANNEL = "threadkeeper_work"


#: ``status = 'running'`` as a literal, for the claim loop's looks (expired leases, runs handed
#: back): every round sends them, and only a literal lets a cached generic plan use the partial
#: index of active runs instead of scanning every finished run (see ``ACTIVE_RUN_SQL``).
_RUNNING_LITERAL = text("agent_runs.status = 'running'")
#: ``status = 'queued'`` as a literal, so the partial index of queued requests serves.
_QUEUED_LITERAL = text("agent_run_requests.status = 'queued'")


class RunRequestRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def withdraw(self, request_id: uuid.UUID) -> None:
        """A queued request cancelled before any worker took it (the caller holds the thread
        lock and saw it queued); WaitRequest's followers (subscribed by the request id on the
        run-events channel; ids never collide with run ids) are woken at commit.

        The other way out of ``queued`` has one writer too: the claim's ``start_head``
        (app/repositories/run_leases.py) dispatches a request and starts its run in one
        statement, so no code path marks a request dispatched without its run."""
        await self.session.execute(
            update(AgentRunRequest)
            .where(AgentRunRequest.id == request_id)
            .values(status=RequestStatus.CANCELLED)
        )
        await self.session.execute(select(func.pg_notify(RUN_EVENTS_CHANNEL, str(request_id))))

    async def get(self, request_id: uuid.UUID) -> AgentRunRequest | None:
        return await self.session.get(AgentRunRequest, request_id)

    async def has_queued(self, thread_id: uuid.UUID) -> bool:
        """Whether input waits in the thread's queue (the partial index of queued requests)."""
        found = await self.session.scalar(
            select(AgentRunRequest.id)
            .where(AgentRunRequest.thread_id == thread_id, _QUEUED_LITERAL)
            .limit(1)
        )
        return found is not None

    async def get_owned(
        self, request_id: uuid.UUID, owner_id: str, *, for_update: bool = False
    ) -> AgentRunRequest:
        """Another owner's request is indistinguishable from a missing one (404, not 403)."""
        stmt = (
            select(AgentRunRequest)
            .join(Conversation, Conversation.id == AgentRunRequest.thread_id)
            .where(
                AgentRunRequest.id == request_id,
                Conversation.owner_id == owner_id,
            )
            .execution_options(populate_existing=True)
        )
        if for_update:
            stmt = stmt.with_for_update(of=AgentRunRequest)
        request = await self.session.scalar(stmt)
        if request is None:
            raise NotFound(f"request {request_id} not found")
        return request

    async def cancelled_among(self, request_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Which of these requests were cancelled (their user messages are withdrawn)."""
        if not request_ids:
            return set()
        rows = await self.session.scalars(
            select(AgentRunRequest.id).where(
                AgentRunRequest.id.in_(list(request_ids)),
                AgentRunRequest.status == RequestStatus.CANCELLED,
            )
        )
        return set(rows)

    async def list_for_thread(
        self, thread_id: uuid.UUID, *, limit: int, offset: int = 0
    ) -> Sequence[AgentRunRequest]:
        """The thread's run requests, newest first (the LangGraph surface lists them as runs)."""
        return (
            await self.session.scalars(
                select(AgentRunRequest)
                .where(AgentRunRequest.thread_id == thread_id)
                .order_by(AgentRunRequest.seq.desc())
                .limit(limit)
                .offset(offset)
            )
        ).all()


class RunRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def announce_work(self) -> None:
        """Wake the workers of every process when the surrounding transaction commits."""
        await self.session.execute(select(func.pg_notify(WORK_CHANNEL, "")))

    async def get(self, run_id: uuid.UUID) -> AgentRun | None:
        return await self.session.get(AgentRun, run_id, populate_existing=True)

    async def get_owned(self, run_id: uuid.UUID, owner_id: str) -> AgentRun:
        """Another owner's run is indistinguishable from a missing one (404, not 403)."""
        run = await self.session.scalar(
            select(AgentRun)
            .join(Conversation, Conversation.id == AgentRun.thread_id)
            .where(AgentRun.id == run_id, Conversation.owner_id == owner_id)
        )
        if run is None:
            raise NotFound(f"run {run_id} not found")
        return run

    async def for_request(self, request_id: uuid.UUID) -> AgentRun | None:
        """The run that answers a dispatched request (runs are never replayed: at most one)."""
        return await self.session.scalar(
            select(AgentRun)
            .where(AgentRun.request_id == request_id)
            .order_by(AgentRun.created_at.desc())
            .limit(1)
        )

    async def latest_for_threads(
        self, thread_ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, AgentRun]:
        """Each thread's latest run (one query)."""
        if not thread_ids:
            return {}
        rows = await self.session.scalars(
            select(AgentRun)
            .where(AgentRun.thread_id.in_(list(thread_ids)))
            .ext(distinct_on(AgentRun.thread_id))
            .order_by(AgentRun.thread_id, AgentRun.created_at.desc(), AgentRun.id)
        )
        return {run.thread_id: run for run in rows}

    async def for_requests(self, request_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, AgentRun]:
        """The runs answering these requests, by request id (one query)."""
        if not request_ids:
            return {}
        rows = await self.session.scalars(
            select(AgentRun).where(AgentRun.request_id.in_(list(request_ids)))
        )
        return {run.request_id: run for run in rows}

    async def lock(self, run_id: uuid.UUID) -> AgentRun | None:
        """``SELECT ... FOR UPDATE`` the run row. Callers that took the thread lock first run under
        its ``lock_timeout``: a run row held past it (a worker writing the run's messages) is the
        same "try again" as a held thread lock, so it becomes ThreadBusy too, not a 500."""
        async with lock_errors_as_busy("the run is locked by another operation"):
            return await self.session.scalar(
                select(AgentRun)
                .where(AgentRun.id == run_id)
                .with_for_update()
                .execution_options(populate_existing=True)
            )

    async def list_for_thread(self, thread_id: uuid.UUID, *, limit: int = 50) -> Sequence[AgentRun]:
        return (
            await self.session.scalars(
                select(AgentRun)
                .where(AgentRun.thread_id == thread_id)
                .order_by(AgentRun.created_at.desc(), AgentRun.id)
                .limit(limit)
            )
        ).all()

    async def expired(self, *, limit: int = 20) -> Sequence[AgentRun]:
        return (
            await self.session.scalars(
                select(AgentRun)
                .where(
                    _RUNNING_LITERAL,
                    AgentRun.lease_holder.is_not(None),
                    AgentRun.lease_expires_at < func.now(),
                )
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
        ).all()
