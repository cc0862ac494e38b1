"""Run requests (the per-thread FIFO) and runs (with leases and their status transitions)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from app import metrics
from app.db.models import (
    ACTIVE_RUN_STATUSES,
    AgentRun,
    AgentRunRequest,
    Conversation,
    RequestStatus,
    RunStatus,
)
from app.db.run_events import RunError, StatusEvent, failed_event, hitl_request
from app.domain.errors import NotFound
from app.repositories.locking import lock_errors_as_busy
from app.repositories.run_events import RUN_EVENTS_CHANNEL, RunEventRepository
from app.repositories.run_leases import RunLeaseStatements

#: LISTEN/NOTIFY channel that wakes workers in other processes: a thread may have become
#: claimable (a message queued on an idle thread, a run resumed). Polling stays the fallback.
WORK_CHANNEL = "threadkeeper_work"


class IllegalTransition(RuntimeError):
    """A status change the run's state machine does not allow (the caller holds the run's
    lock and checked its status first, so this is a bug or an unlocked race, never user input)."""


#: ``status = 'running'`` as a literal, for the claim loop's looks (expired leases, runs handed
#: back): every round sends them, and only a literal lets a cached generic plan use the partial
#: index of active runs instead of scanning every finished run (see ``ACTIVE_RUN_SQL``).
_RUNNING_LITERAL = text("agent_runs.status = 'running'")

#: The columns that say no worker holds the run.
_NO_LEASE: dict[str, Any] = {"lease_holder": None, "lease_expires_at": None}


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
                    _RUNNING_LITERAL,
                    AgentRun.lease_holder.is_not(None),
                    AgentRun.lease_expires_at < func.now(),
                )
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
        ).all()

    # --- status transitions: the one writer of a run's status --------------------------------
    # Each writes the status and its typed ``status`` event in the caller's transaction (so both
    # commit or neither does) and refuses a change the state machine does not allow. The final
    # ones (complete, fail, cancel) also count the run in ``threadkeeper_runs_finished``. A run
    # starts in one place only: the claim's ``RunLeaseStatements.start_head`` statement.
    async def claim_resumable(
        self, holder: str, lease_seconds: float
    ) -> tuple[AgentRun, Any] | None:
        """A run handed back (resumed, or released by a draining worker: running, no lease
        holder), now leased to ``holder``; with the ``resume_payload`` it was handed back with.
        The transition's one statement (app/repositories/run_leases.py), in this transaction."""
        claimed = await RunLeaseStatements(self.session).claim_resumable(holder, lease_seconds)
        if claimed is None:
            return None
        run = await self.get(claimed.run_id)
        assert run is not None
        return run, claimed.payload

    async def interrupt(self, run_id: uuid.UUID, interrupt: dict[str, Any]) -> None:
        """The run waits for a human decision; no worker holds it meanwhile."""
        await self._transition(
            run_id,
            "interrupt",
            {RunStatus.RUNNING},
            StatusEvent(type="status", status="interrupted", interrupt=hitl_request(interrupt)),
            status=RunStatus.INTERRUPTED,
            interrupt=interrupt,
            error=None,
            error_code=None,
            **_NO_LEASE,
        )

    async def resume(self, run_id: uuid.UUID, resume_payload: dict[str, Any]) -> None:
        """Answered: running again, for the next worker that claims it (``claim_resumable``)."""
        await self._transition(
            run_id,
            "resume",
            {RunStatus.INTERRUPTED},
            StatusEvent(type="status", status="resumed"),
            status=RunStatus.RUNNING,
            resume_payload=resume_payload,
            interrupt=None,
            **_NO_LEASE,
        )

    async def release(self, run_id: uuid.UUID, handoff: dict[str, Any]) -> None:
        """A draining worker hands the run back at a step boundary (running, no lease holder)."""
        await self._transition(
            run_id,
            "release",
            {RunStatus.RUNNING},
            StatusEvent(type="status", status="running", handoff=True),
            resume_payload=handoff,
            **_NO_LEASE,
        )

    async def complete(self, run_id: uuid.UUID) -> None:
        await self._transition(
            run_id,
            "complete",
            {RunStatus.RUNNING},
            StatusEvent(type="status", status="completed", final=True),
            status=RunStatus.COMPLETED,
            error=None,
            error_code=None,
            interrupt=None,
            finished_at=func.now(),
            **_NO_LEASE,
        )
        metrics.record_run_finished(RunStatus.COMPLETED)

    async def fail(self, run_id: uuid.UUID, error: RunError) -> None:
        await self._transition(
            run_id,
            "fail",
            {RunStatus.RUNNING},
            failed_event(error),
            status=RunStatus.FAILED,
            error=error.message,
            error_code=error.code,
            provider_status=error.provider_status,
            provider_code=error.provider_code,
            interrupt=None,
            finished_at=func.now(),
            **_NO_LEASE,
        )
        metrics.record_run_finished(RunStatus.FAILED)

    async def cancel(self, run_id: uuid.UUID, error: RunError) -> None:
        """Ended by request: a running run (its worker stopped it, or no worker held it yet) or
        an interrupted one (nothing runs)."""
        await self._transition(
            run_id,
            "cancel",
            set(ACTIVE_RUN_STATUSES),
            # The code but not the message: the client asked for this, "cancelled" says it all
            # (the console shows an event's ``error`` beside its status; the run row keeps both).
            StatusEvent(type="status", status="cancelled", final=True, error_code=error.code),
            status=RunStatus.CANCELLED,
            cancel_requested=True,
            error=error.message,
            error_code=error.code,
            resume_payload=None,
            finished_at=func.now(),
            **_NO_LEASE,
        )
        metrics.record_run_finished(RunStatus.CANCELLED)

    async def request_cancel(self, run_id: uuid.UUID) -> None:
        """Ask the worker holding a running run to stop it (it ends it with ``cancel``)."""
        result = await self.session.execute(
            update(AgentRun)
            .where(AgentRun.id == run_id, AgentRun.status == RunStatus.RUNNING)
            .values(cancel_requested=True)
            .returning(AgentRun.id)
        )
        if result.scalar() is None:
            raise IllegalTransition(f"run {run_id}: request_cancel needs a running run")

    async def _transition(
        self,
        run_id: uuid.UUID,
        name: str,
        sources: set[RunStatus],
        event: StatusEvent,
        **values: Any,
    ) -> None:
        """Write ``values`` iff the run is in one of ``sources``, and ``event`` with them."""
        result = await self.session.execute(
            update(AgentRun)
            .where(AgentRun.id == run_id, AgentRun.status.in_(sources))
            .values(**values)
            .returning(AgentRun.id)
        )
        if result.scalar() is None:
            allowed = ", ".join(sorted(s.value for s in sources))
            raise IllegalTransition(f"run {run_id}: {name} needs a run that is {allowed}")
        await self._event(run_id, event)

    async def _event(self, run_id: uuid.UUID, event: StatusEvent) -> None:
        # The one caller of the event repository's status door (see RunEventRepository).
        await RunEventRepository(self.session)._insert(run_id, [event])
