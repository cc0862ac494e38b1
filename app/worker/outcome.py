"""How a run this worker held ends: its outcome written through the run's status transitions,
unless the run is no longer ours (recovered elsewhere, or cancelled and ended by its canceller)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db.driver import driver
from app.db.models import AgentRun, RunStatus
from app.db.run_events import RunError
from app.domain.errors import ThreadBusy
from app.repositories.conversations import ConversationRepository
from app.repositories.run_leases import RunLeaseStatements
from app.repositories.runs import RunRepository, RunRequestRepository
from app.worker.claims import ClaimedRun, handoff_marker
from app.worker.errors import CANCELLED, SUPERSEDED, WORKER_STOPPED
from app.worker.ledger import json_safe


@dataclass(frozen=True, slots=True)
class RunResult:
    """What the graph run came to: completed, interrupted (with the pending interrupt), failed."""

    status: RunStatus
    error: RunError | None = None
    interrupt: dict[str, Any] | None = None


class RunOutcomes:
    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], holder: str, *, engine: AsyncEngine
    ) -> None:
        self.sessions = sessions
        #: The sessions' engine: one-statement writes need no ORM session, only a connection.
        self.engine = engine
        self.holder = holder

    def _ours(self, run: AgentRun | None) -> bool:
        return (
            run is not None and run.status == RunStatus.RUNNING and run.lease_holder == self.holder
        )

    async def finish(self, claimed: ClaimedRun, result: RunResult) -> None:
        """The run's outcome in one statement (app/repositories/run_leases.py): written only if
        this worker still holds the run (else it was recovered or cancelled meanwhile, and the
        other party wrote the outcome); a requested cancel wins over any outcome but completion."""
        async with driver(self.engine) as conn:
            await RunLeaseStatements(conn).finish(
                claimed.run_id,
                self.holder,
                result.status,
                error=result.error,
                interrupt=result.interrupt,
                cancel_error=CANCELLED,
            )

    async def supersede_if_input_waits(self, claimed: ClaimedRun, lock_timeout_ms: int) -> bool:
        """A run that just stopped for a human answer while input was queued behind it (sent
        while it ran): the input supersedes it, as input sent after it stopped does
        (``IntakeService``; LangGraph's server too runs the next queued input on an interrupted
        thread). Under the thread's row lock: the run ends ``cancelled`` (``superseded``) and
        the queued input becomes claimable. Whether it did."""
        try:
            async with self.sessions() as session, session.begin():
                await ConversationRepository(session).lock(
                    claimed.thread_id, timeout_ms=lock_timeout_ms
                )
                if not await RunRequestRepository(session).has_queued(claimed.thread_id):
                    return False
                run = await RunRepository(session).lock(claimed.run_id)
                if run is None or run.status != RunStatus.INTERRUPTED:
                    return False
                await RunLeaseStatements(session).cancel(claimed.run_id, SUPERSEDED)
                await RunRepository(session).announce_work()
                return True
        except ThreadBusy:
            return False  # the input waits as it did before; the run stays interrupted

    async def release(self, claimed: ClaimedRun) -> None:
        """Hand a running run back (no lease holder) for another worker to continue."""
        async with self.sessions() as session, session.begin():
            run = await RunRepository(session).lock(claimed.run_id)
            if run is None or not self._ours(run):
                return
            transitions = RunLeaseStatements(session)
            if run.cancel_requested:
                await transitions.cancel(claimed.run_id, CANCELLED)
                return
            marker = handoff_marker(self.holder, claimed.graph_input)
            await transitions.release(claimed.run_id, json_safe(marker))

    async def stopped(self, claimed: ClaimedRun) -> None:
        """The run's task was stopped (cancel requested, lease lost, task cancelled) without a
        handoff: ``cancelled`` by request, else ``failed`` (worker_stopped)."""
        async with self.sessions() as session, session.begin():
            run = await RunRepository(session).lock(claimed.run_id)
            if run is None or run.status != RunStatus.RUNNING:
                return
            if run.cancel_requested:
                await RunLeaseStatements(session).cancel(claimed.run_id, CANCELLED)
            elif run.lease_holder == self.holder:
                await RunLeaseStatements(session).fail(claimed.run_id, WORKER_STOPPED)
