"""The run state machine: the one writer of a run's status, each transition ONE statement.

Each transition guards or locks the run row, writes the status and its typed ``status`` event
together (data-modifying CTEs: all or nothing) and notifies listeners when it commits. On a bare
connection in autocommit (the worker's: each statement its own transaction; session versions
took six or seven round trips and most of the ORM's CPU of a turn) or on a session inside the
caller's transaction (a use case's or the recovery's: the same SQL). The transitions:

- ``start_head`` (the claim's second statement, under the thread lock its look took): the
  thread's oldest queued request dispatched and its run started, running and leased to the
  caller, ``status: running`` with the request's id (nothing when the thread has no queued
  request any more or a run is active on it: another worker was first). It is the only writer
  of ``dispatched`` (``RunRequestRepository.withdraw`` is the only other way out of ``queued``);
- ``heartbeat``: the lease of a run still the caller's extended (not a status change);
- ``claim_resumable``: a run handed back (running, no lease holder, a ``resume_payload``) now
  leased to the caller, ``status: running`` (SKIP LOCKED: one claimer wins);
- ``finish``: the outcome of a run the caller still holds (running, its lease): ``complete``,
  ``interrupt`` or ``fail``, or ``cancel`` instead when a cancel was requested and the outcome is
  not a completion; nothing at all when the run is no longer the caller's (recovered elsewhere,
  or ended by its canceller);
- ``resume`` (interrupted -> running, no holder, the decisions as its ``resume_payload``),
  ``release`` (a draining worker hands a running run back), ``fail`` (a running run ended
  without its holder's outcome: lease expired, worker stopped), ``cancel`` (a running or
  interrupted run ended by request) and ``request_cancel`` (asks the holder to stop; no status
  change): each writes nothing and raises ``IllegalTransition`` for a run not in a status it
  starts from.

The final ones count the run in ``threadkeeper_runs_finished``. Statuses are literals where the
partial index of active runs must serve the look (see ``app/repositories/claim_queue.py``).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import TextClause, text

from app import metrics
from app.db.driver import AnyConnection
from app.db.models import ACTIVE_RUN_SQL, ACTIVE_RUN_STATUSES, QUEUED_REQUEST_SQL, RunStatus
from app.db.run_events import RunError, StatusEvent, event_row, failed_event, hitl_request
from app.repositories.run_events import RUN_EVENTS_CHANNEL

# Extend the lease of a run still the holder's and not asked to stop. (It begins as the
# session's statement did: operators and tests/integration/test_run_lifecycle.py spot it in
# pg_stat_activity by that.)
_HEARTBEAT = text(
    """UPDATE agent_runs SET lease_expires_at = now() + make_interval(secs => :lease_seconds)
WHERE id = :run_id AND lease_holder = :holder AND status = 'running' AND NOT cancel_requested
RETURNING id
"""
)

# Run under the thread lock the claim's look took, in a statement of its own: its snapshot is
# taken after the lock was granted, so a run another worker started (and committed) just before
# is seen here. ``r.status`` is rechecked on the row itself (a request cancelled meanwhile).
# The partial unique index "one active run per thread" refuses a second run all the same.
_START_HEAD = text(
    f"""-- run start: UPDATE agent_run_requests; INSERT INTO agent_runs, run_events
WITH head AS (
    UPDATE agent_run_requests r SET status = 'dispatched'
    WHERE r.id = (
        SELECT q.id FROM agent_run_requests q
        WHERE q.conversation_id = :thread_id AND q.{QUEUED_REQUEST_SQL}
        ORDER BY q.seq
        LIMIT 1
    )
    AND r.{QUEUED_REQUEST_SQL}
    AND NOT EXISTS (
        SELECT 1 FROM agent_runs a WHERE a.conversation_id = :thread_id AND a.{ACTIVE_RUN_SQL}
    )
    -- WaitRequest's followers of this request (app/services/run_feed.py) wake at commit.
    RETURNING r.id, r.payload, pg_notify(:channel, r.id::text) AS woke
),
run AS (
    INSERT INTO agent_runs (
        id, conversation_id, request_id, status, lease_holder, lease_expires_at, started_at
    )
    SELECT :run_id, :thread_id, head.id, 'running', :holder,
        now() + make_interval(secs => :lease_seconds), now()
    FROM head
    RETURNING id, request_id
),
ev AS (
    INSERT INTO run_events (run_id, type, data)
    SELECT run.id, 'status',
        CAST(:event AS jsonb) || jsonb_build_object('request_id', CAST(run.request_id AS text))
    FROM run
    RETURNING run_id
)
SELECT head.id AS request_id, head.payload, run.id AS run_id,
    pg_notify(:channel, CAST(run.id AS text)) AS woke, (SELECT count(*) FROM ev) AS events
FROM head JOIN run ON run.request_id = head.id
"""
)

# The run handed back longest ago; its thread's owner and agent come with it.
_CLAIM_RESUMABLE = text(
    """-- run claim_resumable: UPDATE agent_runs; INSERT INTO run_events
WITH picked AS MATERIALIZED (
    SELECT r.id, r.resume_payload FROM agent_runs r
    WHERE r.status = 'running' AND r.lease_holder IS NULL AND r.resume_payload IS NOT NULL
    ORDER BY r.created_at
    LIMIT 1
    FOR UPDATE OF r SKIP LOCKED
),
claimed AS (
    UPDATE agent_runs r
    SET lease_holder = :holder,
        lease_expires_at = now() + make_interval(secs => :lease_seconds),
        resume_payload = NULL
    FROM picked WHERE r.id = picked.id
    RETURNING r.id, r.conversation_id, r.request_id, picked.resume_payload
),
ev AS (
    INSERT INTO run_events (run_id, type, data)
    SELECT claimed.id, 'status', CAST(:event AS jsonb) FROM claimed
    RETURNING run_id
)
SELECT claimed.id, claimed.conversation_id AS thread_id, claimed.resume_payload,
    c.owner_id, c.agent_id, pg_notify(:channel, CAST(claimed.id AS text)) AS woke,
    (SELECT count(*) FROM ev) AS events, q.payload AS request_payload
FROM claimed JOIN conversations c ON c.id = claimed.conversation_id
LEFT JOIN agent_run_requests q ON q.id = claimed.request_id
"""
)

# ``kind``: 'outcome' (the result's transition) or 'cancel' (a cancel was requested and the
# result is not a completion). Each column takes the value of the chosen transition.
_FINISH = text(
    """-- run finish: UPDATE agent_runs; INSERT INTO run_events
WITH cur AS MATERIALIZED (
    SELECT r.id,
        CASE WHEN r.cancel_requested AND :cancellable THEN 'cancel' ELSE 'outcome' END AS kind
    FROM agent_runs r
    WHERE r.id = :run_id AND r.status = 'running' AND r.lease_holder = :holder
    FOR UPDATE OF r
),
done AS (
    UPDATE agent_runs r
    SET status = CAST(CASE WHEN cur.kind = 'cancel' THEN 'cancelled' ELSE :status END
            AS run_status),
        cancel_requested = r.cancel_requested OR cur.kind = 'cancel',
        error = CASE WHEN cur.kind = 'cancel' THEN :cancel_error ELSE :error END,
        error_code = CASE WHEN cur.kind = 'cancel' THEN :cancel_code ELSE :error_code END,
        provider_status = CASE WHEN cur.kind = 'cancel' THEN NULL
            ELSE CAST(:provider_status AS integer) END,
        provider_code = CASE WHEN cur.kind = 'cancel' THEN NULL ELSE :provider_code END,
        interrupt = CASE WHEN cur.kind = 'cancel' THEN r.interrupt
            ELSE CAST(:interrupt AS jsonb) END,
        resume_payload = CASE WHEN cur.kind = 'cancel' THEN NULL ELSE r.resume_payload END,
        finished_at = CASE WHEN cur.kind = 'cancel' OR :final THEN now() ELSE r.finished_at END,
        lease_holder = NULL,
        lease_expires_at = NULL
    FROM cur WHERE r.id = cur.id
    RETURNING r.id, cur.kind
),
ev AS (
    INSERT INTO run_events (run_id, type, data)
    SELECT done.id, 'status',
        CASE WHEN done.kind = 'cancel' THEN CAST(:cancel_event AS jsonb)
            ELSE CAST(:event AS jsonb) END
    FROM done
    RETURNING run_id
)
SELECT done.kind, pg_notify(:channel, CAST(done.id AS text)) AS woke,
    (SELECT count(*) FROM ev) AS events
FROM done
"""
)


class IllegalTransition(RuntimeError):
    """A status change the run's state machine does not allow (the caller holds the run's
    lock and checked its status first, so this is a bug or an unlocked race, never user input)."""


def _guarded(name: str, sources: tuple[RunStatus, ...], assignments: str) -> TextClause:
    """A transition that writes ``assignments`` and its status event (``:event``), and drops
    the lease, iff the run is in one of ``sources``; no row back when it is not."""
    allowed = ", ".join(f"'{s.value}'" for s in sources)
    return text(
        f"""-- run {name}: UPDATE agent_runs; INSERT INTO run_events
WITH done AS (
    UPDATE agent_runs SET {assignments}, lease_holder = NULL, lease_expires_at = NULL
    WHERE id = :run_id AND status IN ({allowed})
    RETURNING id
),
ev AS (
    INSERT INTO run_events (run_id, type, data)
    SELECT done.id, 'status', CAST(:event AS jsonb) FROM done
    RETURNING run_id
)
SELECT done.id, pg_notify(:channel, CAST(done.id AS text)) AS woke,
    (SELECT count(*) FROM ev) AS events
FROM done
"""
    )


_RESUME = _guarded(
    "resume",
    (RunStatus.INTERRUPTED,),
    "status = 'running', resume_payload = CAST(:payload AS jsonb), interrupt = NULL",
)
_RELEASE = _guarded("release", (RunStatus.RUNNING,), "resume_payload = CAST(:payload AS jsonb)")
_FAIL = _guarded(
    "fail",
    (RunStatus.RUNNING,),
    "status = 'failed', error = :error, error_code = :error_code, "
    "provider_status = CAST(:provider_status AS integer), provider_code = :provider_code, "
    "interrupt = NULL, finished_at = now()",
)
_CANCEL = _guarded(
    "cancel",
    ACTIVE_RUN_STATUSES,
    "status = 'cancelled', cancel_requested = true, error = :error, error_code = :error_code, "
    "resume_payload = NULL, finished_at = now()",
)
_REQUEST_CANCEL = text(
    """UPDATE agent_runs SET cancel_requested = true WHERE id = :run_id AND status = 'running'
RETURNING id
"""
)


@dataclass(frozen=True, slots=True)
class Started:
    """The run started for the thread's oldest queued request."""

    run_id: uuid.UUID
    request_id: uuid.UUID
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Resumable:
    """A run handed back, now leased to the claimer."""

    run_id: uuid.UUID
    thread_id: uuid.UUID
    owner_id: str
    agent_id: str
    #: What it was handed back with: a human's decisions, or a draining worker's handoff.
    payload: Any
    #: The payload of the request the run answers (its graph options: ``configurable``...).
    request_payload: dict[str, Any] = field(default_factory=dict)


def _event_json(event: StatusEvent) -> str:
    _, data = event_row(event)
    return json.dumps(data)


def _outcome(status: RunStatus, error: RunError | None, interrupt: Any) -> dict[str, Any]:
    """The columns and event of the named transition for a run's result (not a cancel)."""
    if status == RunStatus.COMPLETED:
        event = StatusEvent(type="status", status="completed", final=True)
        return {"error": None, "error_code": None, "interrupt": None, "final": True, "e": event}
    if status == RunStatus.INTERRUPTED:
        typed = hitl_request(interrupt)
        event = StatusEvent(
            type="status",
            status="interrupted",
            interrupt=typed,
            interrupt_value=None if typed is not None else interrupt,
        )
        return {
            "error": None,
            "error_code": None,
            "interrupt": interrupt,
            "final": False,
            "e": event,
        }
    assert status == RunStatus.FAILED and error is not None
    event = failed_event(error)
    return {
        "error": error.message,
        "error_code": error.code,
        "interrupt": None,
        "final": True,
        "e": event,
    }


class RunLeaseStatements:
    """On a bare connection in autocommit (each statement its own transaction), or on a
    session inside the caller's transaction (the same SQL)."""

    def __init__(self, conn: AnyConnection) -> None:
        self.conn = conn

    async def heartbeat(self, run_id: uuid.UUID, holder: str, lease_seconds: float) -> bool:
        """Extend the lease; False when it was lost (expired and recovered, or cancelled)."""
        found = await self.conn.execute(
            _HEARTBEAT, {"run_id": run_id, "holder": holder, "lease_seconds": float(lease_seconds)}
        )
        return found.first() is not None

    async def start_head(
        self, thread_id: uuid.UUID, holder: str, lease_seconds: float
    ) -> Started | None:
        """Dispatch the locked thread's oldest queued request and start its run, leased to
        ``holder``; None when the thread has no queued request any more or a run is active
        on it (another worker was first)."""
        row = (
            await self.conn.execute(
                _START_HEAD,
                {
                    "thread_id": thread_id,
                    "run_id": uuid.uuid4(),
                    "holder": holder,
                    "lease_seconds": float(lease_seconds),
                    "event": _event_json(StatusEvent(type="status", status="running")),
                    "channel": RUN_EVENTS_CHANNEL,
                },
            )
        ).first()
        if row is None:
            return None
        return Started(row.run_id, row.request_id, row.payload)

    async def claim_resumable(self, holder: str, lease_seconds: float) -> Resumable | None:
        row = (
            await self.conn.execute(
                _CLAIM_RESUMABLE,
                {
                    "holder": holder,
                    "lease_seconds": float(lease_seconds),
                    "event": _event_json(StatusEvent(type="status", status="running")),
                    "channel": RUN_EVENTS_CHANNEL,
                },
            )
        ).first()
        if row is None:
            return None
        return Resumable(
            row.id,
            row.thread_id,
            row.owner_id,
            row.agent_id,
            row.resume_payload,
            row.request_payload or {},
        )

    async def finish(
        self,
        run_id: uuid.UUID,
        holder: str,
        status: RunStatus,
        *,
        error: RunError | None = None,
        interrupt: dict[str, Any] | None = None,
        cancel_error: RunError,
    ) -> RunStatus | None:
        """The run's outcome (``complete``, ``interrupt``, ``fail``; ``cancel`` when a cancel
        was requested and ``status`` is not completed) iff ``holder`` still holds it; the status
        written, or None (not ours any more: nothing written)."""
        values = _outcome(status, error, interrupt)
        cancel_event = StatusEvent(
            type="status", status="cancelled", final=True, error_code=cancel_error.code
        )
        row = (
            await self.conn.execute(
                _FINISH,
                {
                    "run_id": run_id,
                    "holder": holder,
                    "cancellable": status != RunStatus.COMPLETED,
                    "status": status.value,
                    "error": values["error"],
                    "error_code": values["error_code"],
                    "provider_status": error.provider_status if error else None,
                    "provider_code": error.provider_code if error else None,
                    "interrupt": None if values["interrupt"] is None else json.dumps(interrupt),
                    "final": values["final"],
                    "event": _event_json(values["e"]),
                    "cancel_error": cancel_error.message,
                    "cancel_code": cancel_error.code,
                    "cancel_event": _event_json(cancel_event),
                    "channel": RUN_EVENTS_CHANNEL,
                },
            )
        ).first()
        if row is None:
            return None
        written = RunStatus.CANCELLED if row.kind == "cancel" else status
        if written != RunStatus.INTERRUPTED:
            metrics.record_run_finished(written)
        return written

    # --- by a use case or the recovery, in the caller's transaction (IllegalTransition) -----
    async def resume(self, run_id: uuid.UUID, payload: dict[str, Any]) -> None:
        """Answered: running again, for the next worker that claims it (``claim_resumable``)."""
        event = StatusEvent(type="status", status="resumed")
        await self._guarded(_RESUME, "resume", run_id, event, payload=json.dumps(payload))

    async def release(self, run_id: uuid.UUID, handoff: dict[str, Any]) -> None:
        """A draining worker hands the run back at a step boundary (running, no lease holder)."""
        event = StatusEvent(type="status", status="running", handoff=True)
        await self._guarded(_RELEASE, "release", run_id, event, payload=json.dumps(handoff))

    async def fail(self, run_id: uuid.UUID, error: RunError) -> None:
        """A running run ended without its holder's outcome (lease expired, worker stopped)."""
        await self._guarded(
            _FAIL,
            "fail",
            run_id,
            failed_event(error),
            error=error.message,
            error_code=error.code,
            provider_status=error.provider_status,
            provider_code=error.provider_code,
        )
        metrics.record_run_finished(RunStatus.FAILED)

    async def cancel(self, run_id: uuid.UUID, error: RunError) -> None:
        """Ended by request: a running run (its worker stopped it, or no worker held it yet) or
        an interrupted one (nothing runs)."""
        # The code but not the message: the client asked for this, "cancelled" says it all
        # (the console shows an event's ``error`` beside its status; the run row keeps both).
        event = StatusEvent(type="status", status="cancelled", final=True, error_code=error.code)
        await self._guarded(
            _CANCEL, "cancel", run_id, event, error=error.message, error_code=error.code
        )
        metrics.record_run_finished(RunStatus.CANCELLED)

    async def request_cancel(self, run_id: uuid.UUID) -> None:
        """Ask the worker holding a running run to stop it (it ends it with ``cancel``)."""
        if (await self.conn.execute(_REQUEST_CANCEL, {"run_id": run_id})).first() is None:
            raise IllegalTransition(f"run {run_id}: request_cancel needs a running run")

    async def _guarded(
        self, statement: TextClause, name: str, run_id: uuid.UUID, event: StatusEvent, **params: Any
    ) -> None:
        values = {"run_id": run_id, "event": _event_json(event), "channel": RUN_EVENTS_CHANNEL}
        if (await self.conn.execute(statement, {**values, **params})).first() is None:
            raise IllegalTransition(f"run {run_id}: {name} is not allowed from its status")
