"""Run requests (the per-thread FIFO), runs (with leases) and their events."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, exists, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import (
    ACTIVE_RUN_STATUSES,
    TERMINAL_RUN_STATUSES,
    AgentRun,
    AgentRunRequest,
    Conversation,
    RequestStatus,
    RunEvent,
    RunStatus,
)
from app.repositories.locking import lock_errors_as_busy

#: LISTEN/NOTIFY channel that wakes event streams (see app/services/run_events.py).
RUN_EVENTS_CHANNEL = "threadkeeper_run_events"
#: LISTEN/NOTIFY channel that wakes workers in other processes: a thread may have become
#: claimable (a message queued on an idle thread, a run resumed). Polling stays the fallback.
WORK_CHANNEL = "threadkeeper_work"


class RunRequestRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def enqueue(
        self,
        conversation_id: uuid.UUID,
        seq: int,
        payload: dict[str, Any],
        *,
        request_id: uuid.UUID | None = None,
        idempotency_key: str | None = None,
        idempotency_fingerprint: str | None = None,
    ) -> AgentRunRequest:
        req = AgentRunRequest(
            id=request_id or uuid.uuid4(),
            conversation_id=conversation_id,
            seq=seq,
            payload=payload,
            status=RequestStatus.QUEUED,
            idempotency_key=idempotency_key,
            idempotency_fingerprint=idempotency_fingerprint,
        )
        self.session.add(req)
        await self.session.flush()
        return req

    async def has_queued(self, conversation_id: uuid.UUID) -> bool:
        return bool(
            await self.session.scalar(
                select(
                    exists().where(
                        AgentRunRequest.conversation_id == conversation_id,
                        AgentRunRequest.status == RequestStatus.QUEUED,
                    )
                )
            )
        )

    async def oldest_queued(self, conversation_id: uuid.UUID) -> AgentRunRequest | None:
        return await self.session.scalar(
            select(AgentRunRequest)
            .where(
                AgentRunRequest.conversation_id == conversation_id,
                AgentRunRequest.status == RequestStatus.QUEUED,
            )
            .order_by(AgentRunRequest.seq)
            .limit(1)
            .with_for_update(skip_locked=True)
        )

    async def mark(self, request_id: uuid.UUID, status: RequestStatus) -> None:
        await self.session.execute(
            update(AgentRunRequest).where(AgentRunRequest.id == request_id).values(status=status)
        )

    async def get(self, request_id: uuid.UUID) -> AgentRunRequest | None:
        return await self.session.get(AgentRunRequest, request_id)

    async def get_owned(
        self, request_id: uuid.UUID, owner_id: str, *, for_update: bool = False
    ) -> AgentRunRequest | None:
        """Another owner's request is indistinguishable from a missing one."""
        stmt = (
            select(AgentRunRequest)
            .join(Conversation, Conversation.id == AgentRunRequest.conversation_id)
            .where(
                AgentRunRequest.id == request_id,
                Conversation.owner_id == owner_id,
                Conversation.archived.is_(False),
            )
            .execution_options(populate_existing=True)
        )
        if for_update:
            stmt = stmt.with_for_update(of=AgentRunRequest)
        return await self.session.scalar(stmt)

    async def by_idempotency_key(
        self, conversation_id: uuid.UUID, key: str
    ) -> AgentRunRequest | None:
        return await self.session.scalar(
            select(AgentRunRequest).where(
                AgentRunRequest.conversation_id == conversation_id,
                AgentRunRequest.idempotency_key == key,
            )
        )

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

    async def claimable_conversation(self) -> uuid.UUID | None:
        """The idle thread whose oldest queued input waited longest, locked (SKIP LOCKED).

        Locking the Conversation row here is what keeps claim, intake and compress apart.
        """
        queued = (
            select(func.min(AgentRunRequest.created_at))
            .where(
                AgentRunRequest.conversation_id == Conversation.id,
                AgentRunRequest.status == RequestStatus.QUEUED,
            )
            .scalar_subquery()
        )
        active = exists().where(
            AgentRun.conversation_id == Conversation.id,
            AgentRun.status.in_(ACTIVE_RUN_STATUSES),
        )
        stmt = (
            select(Conversation.id)
            .where(queued.is_not(None), ~active, Conversation.archived.is_(False))
            .order_by(queued)
            .limit(1)
            .with_for_update(of=Conversation, skip_locked=True)
        )
        return await self.session.scalar(stmt)


class RunRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def announce_work(self) -> None:
        """Wake the workers of every process when the surrounding transaction commits."""
        await self.session.execute(select(func.pg_notify(WORK_CHANNEL, "")))

    async def active_status(self, conversation_id: uuid.UUID) -> RunStatus | None:
        return await self.session.scalar(
            select(AgentRun.status).where(
                AgentRun.conversation_id == conversation_id,
                AgentRun.status.in_(ACTIVE_RUN_STATUSES),
            )
        )

    async def start(
        self,
        *,
        conversation_id: uuid.UUID,
        request_id: uuid.UUID,
        holder: str,
        lease_seconds: float,
    ) -> AgentRun:
        run = AgentRun(
            id=uuid.uuid4(),
            conversation_id=conversation_id,
            request_id=request_id,
            status=RunStatus.RUNNING,
            lease_holder=holder,
            lease_expires_at=func.now() + timedelta(seconds=lease_seconds),
            started_at=func.now(),
        )
        self.session.add(run)
        await self.session.flush()
        await self.session.refresh(run)
        return run

    async def get(self, run_id: uuid.UUID) -> AgentRun | None:
        return await self.session.get(AgentRun, run_id, populate_existing=True)

    async def get_owned(self, run_id: uuid.UUID, owner_id: str) -> AgentRun | None:
        return await self.session.scalar(
            select(AgentRun)
            .join(Conversation, Conversation.id == AgentRun.conversation_id)
            .where(AgentRun.id == run_id, Conversation.owner_id == owner_id)
        )

    async def for_request(self, request_id: uuid.UUID) -> AgentRun | None:
        """The run that answers a dispatched request (runs are never replayed: at most one)."""
        return await self.session.scalar(
            select(AgentRun)
            .where(AgentRun.request_id == request_id)
            .order_by(AgentRun.created_at.desc())
            .limit(1)
        )

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

    async def list_for_conversation(
        self, conversation_id: uuid.UUID, *, limit: int = 50
    ) -> Sequence[AgentRun]:
        return (
            await self.session.scalars(
                select(AgentRun)
                .where(AgentRun.conversation_id == conversation_id)
                .order_by(AgentRun.created_at.desc(), AgentRun.id)
                .limit(limit)
            )
        ).all()

    async def heartbeat(self, run_id: uuid.UUID, holder: str, lease_seconds: float) -> bool:
        """Extend the lease; False when the lease was lost (expired and recovered, or cancelled)."""
        result = await self.session.execute(
            update(AgentRun)
            .where(
                AgentRun.id == run_id,
                AgentRun.lease_holder == holder,
                AgentRun.status == RunStatus.RUNNING,
                AgentRun.cancel_requested.is_(False),
            )
            .values(lease_expires_at=func.now() + timedelta(seconds=lease_seconds))
            .returning(AgentRun.id)
        )
        return result.scalar() is not None

    async def holds_lease(self, run_id: uuid.UUID, holder: str) -> bool:
        """Still ours and running? Locks the run row, so recovery cannot interleave."""
        found = await self.session.scalar(
            select(AgentRun.id)
            .where(
                AgentRun.id == run_id,
                AgentRun.lease_holder == holder,
                AgentRun.status == RunStatus.RUNNING,
            )
            .with_for_update()
        )
        return found is not None

    async def set_fields(self, run_id: uuid.UUID, **values: Any) -> None:
        await self.session.execute(update(AgentRun).where(AgentRun.id == run_id).values(**values))

    async def add_usage(
        self, run_id: uuid.UUID, *, input_tokens: int, output_tokens: int, calls: int
    ) -> None:
        await self.session.execute(
            update(AgentRun)
            .where(AgentRun.id == run_id)
            .values(
                input_tokens=AgentRun.input_tokens + input_tokens,
                output_tokens=AgentRun.output_tokens + output_tokens,
                model_calls=AgentRun.model_calls + calls,
            )
        )

    async def expired(self, *, limit: int = 20) -> Sequence[AgentRun]:
        return (
            await self.session.scalars(
                select(AgentRun)
                .where(
                    AgentRun.status == RunStatus.RUNNING,
                    AgentRun.lease_holder.is_not(None),
                    AgentRun.lease_expires_at < func.now(),
                )
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
        ).all()

    async def claim_resumable(self, holder: str, lease_seconds: float) -> AgentRun | None:
        """A run that ResumeRun handed back (running, no lease holder), now leased to ``holder``."""
        run = await self.session.scalar(
            select(AgentRun)
            .where(
                AgentRun.status == RunStatus.RUNNING,
                AgentRun.lease_holder.is_(None),
                AgentRun.resume_payload.is_not(None),
            )
            .order_by(AgentRun.created_at)
            .limit(1)
            .with_for_update(skip_locked=True)
        )
        if run is None:
            return None
        await self.set_fields(
            run.id,
            lease_holder=holder,
            lease_expires_at=func.now() + timedelta(seconds=lease_seconds),
        )
        await self.session.refresh(run)
        return run


class RunEventRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def append(self, run_id: uuid.UUID, type_: str, data: dict[str, Any]) -> int:
        """Insert the event; listeners are notified when the surrounding transaction commits."""
        [event_id] = await self.append_many(run_id, [(type_, data)])
        return event_id

    async def append_many(
        self, run_id: uuid.UUID, events: Sequence[tuple[str, dict[str, Any]]]
    ) -> list[int]:
        """Insert events in order with one statement and one notification (ids ascend in order)."""
        rows = [RunEvent(run_id=run_id, type=type_, data=data) for type_, data in events]
        self.session.add_all(rows)
        await self.session.flush()
        await self.session.execute(select(func.pg_notify(RUN_EVENTS_CHANNEL, str(run_id))))
        return [int(r.id) for r in rows]

    async def prune_finished(self, *, older_than_seconds: float, limit: int) -> int:
        """Delete up to ``limit`` events of runs that ended more than ``older_than_seconds`` ago
        (completed, failed or cancelled; interrupted runs can still resume and keep theirs)."""
        finished = (
            select(RunEvent.id)
            .join(AgentRun, AgentRun.id == RunEvent.run_id)
            .where(
                AgentRun.status.in_(TERMINAL_RUN_STATUSES),
                AgentRun.finished_at < func.now() - timedelta(seconds=older_than_seconds),
            )
            .limit(limit)
            .scalar_subquery()
        )
        result = await self.session.execute(
            delete(RunEvent).where(RunEvent.id.in_(finished)).returning(RunEvent.id)
        )
        return len(result.all())

    async def after(
        self, run_id: uuid.UUID, after_id: int, *, limit: int = 500
    ) -> Sequence[RunEvent]:
        return (
            await self.session.scalars(
                select(RunEvent)
                .where(RunEvent.run_id == run_id, RunEvent.id > after_id)
                .order_by(RunEvent.id)
                .limit(limit)
            )
        ).all()
