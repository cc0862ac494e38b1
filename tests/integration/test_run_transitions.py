"""The run state machine (app/repositories/run_leases.py), the one writer of a run's status, on
real PostgreSQL: every transition production uses, through the statements production runs.

Each transition writes the run's status and its typed ``status`` event together (in the
caller's transaction when it has one: both commit or neither does), and a change the state
machine does not allow is refused with nothing written: ``IllegalTransition``, or for the
worker's ``finish`` of a run no longer its own, no status written (None).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import AgentRun, RunEvent, RunStatus
from app.db.run_events import StatusEvent
from app.db.session import create_engine, create_session_factory
from app.repositories.run_leases import IllegalTransition, RunLeaseStatements
from app.repositories.runs import RunRepository
from app.worker.errors import CANCELLED, LEASE_EXPIRED, WORKER_STOPPED
from tests.support.runs import HOLDER, Sessions, started

pytestmark = pytest.mark.integration

INTERRUPT = {"action_requests": [{"name": "search", "args": {"q": "x"}}]}


@pytest.fixture
async def sessions(clean_db: str) -> AsyncIterator[Sessions]:
    engine = create_engine(clean_db)
    try:
        yield create_session_factory(engine)
    finally:
        await engine.dispose()


async def transition(
    sessions: Sessions, work: Callable[[RunLeaseStatements], Awaitable[Any]]
) -> Any:
    """One transition in a session's transaction, as a use case runs it."""
    async with sessions() as session, session.begin():
        return await work(RunLeaseStatements(session))


async def finish(sessions: Sessions, run_id: uuid.UUID, status: RunStatus, **kw: Any) -> Any:
    """The worker's end of a run it holds."""
    return await transition(
        sessions, lambda t: t.finish(run_id, HOLDER, status, cancel_error=CANCELLED, **kw)
    )


async def interrupted(sessions: Sessions) -> uuid.UUID:
    run_id = await started(sessions)
    assert await finish(sessions, run_id, RunStatus.INTERRUPTED, interrupt=INTERRUPT) == (
        RunStatus.INTERRUPTED
    )
    return run_id


async def completed(sessions: Sessions) -> uuid.UUID:
    run_id = await started(sessions)
    assert await finish(sessions, run_id, RunStatus.COMPLETED) == RunStatus.COMPLETED
    return run_id


async def cancelled(sessions: Sessions) -> uuid.UUID:
    run_id = await interrupted(sessions)
    await transition(sessions, lambda t: t.cancel(run_id, CANCELLED))
    return run_id


async def run_and_events(sessions: Sessions, run_id: uuid.UUID) -> tuple[AgentRun, list[RunEvent]]:
    async with sessions() as session:
        run = await RunRepository(session).get(run_id)
        assert run is not None
        events = list(
            await session.scalars(
                select(RunEvent).where(RunEvent.run_id == run_id).order_by(RunEvent.id)
            )
        )
        return run, events


def status_event(event: RunEvent) -> StatusEvent:
    """The stored row read back as the schema's StatusEvent (what StreamRunEvents serves)."""
    assert event.type == "status"
    return msgspec.convert({"type": event.type, **event.data}, StatusEvent)


async def test_start_writes_a_leased_running_run_and_its_first_event(sessions: Sessions) -> None:
    run_id = await started(sessions)
    run, events = await run_and_events(sessions, run_id)
    assert run.status == RunStatus.RUNNING and run.lease_holder == HOLDER
    assert run.started_at is not None and run.lease_expires_at is not None
    [event] = map(status_event, events)
    assert event.status == "running" and event.request_id == run.request_id and not event.final


async def test_interrupt_then_resume_then_claim(sessions: Sessions) -> None:
    run_id = await interrupted(sessions)
    run, events = await run_and_events(sessions, run_id)
    assert run.status == RunStatus.INTERRUPTED and run.interrupt == INTERRUPT
    assert run.lease_holder is None and run.lease_expires_at is None
    assert run.finished_at is None  # interrupted is not final
    last = status_event(events[-1])
    assert last.status == "interrupted" and not last.final
    assert msgspec.to_builtins(last.interrupt) == {
        "action_requests": [{"name": "search", "args": {"q": "x"}, "description": None}],
        "review_configs": [],
    }

    decisions = {"decisions": [{"type": "approve"}]}
    await transition(sessions, lambda t: t.resume(run_id, decisions))
    run, events = await run_and_events(sessions, run_id)
    assert run.status == RunStatus.RUNNING and run.interrupt is None
    assert run.resume_payload == decisions and run.lease_holder is None
    assert status_event(events[-1]).status == "resumed"

    claimed = await transition(sessions, lambda t: t.claim_resumable("other-holder", 30))
    assert claimed is not None
    assert claimed.run_id == run_id and claimed.payload == decisions
    assert claimed.owner_id == "alice"
    run, events = await run_and_events(sessions, run_id)
    assert run.lease_holder == "other-holder" and run.resume_payload is None
    assert status_event(events[-1]).status == "running"


async def test_release_hands_the_run_back_with_a_handoff_event(sessions: Sessions) -> None:
    run_id = await started(sessions)
    marker = {"threadkeeper_handoff": {"holder": HOLDER, "human": None}}
    await transition(sessions, lambda t: t.release(run_id, marker))
    run, events = await run_and_events(sessions, run_id)
    assert run.status == RunStatus.RUNNING and run.lease_holder is None
    assert run.resume_payload == marker
    last = status_event(events[-1])
    assert last.status == "running" and last.handoff and not last.final


async def test_complete_fail_and_cancel_are_final(sessions: Sessions) -> None:
    done = await completed(sessions)
    run, events = await run_and_events(sessions, done)
    assert run.status == RunStatus.COMPLETED and run.finished_at is not None
    assert run.error_code is None and run.lease_holder is None
    assert status_event(events[-1]) == StatusEvent(type="status", status="completed", final=True)

    # Failed by its worker (finish), and without it (lease expired, worker stopped).
    by_worker = await started(sessions)
    assert await finish(sessions, by_worker, RunStatus.FAILED, error=WORKER_STOPPED) == (
        RunStatus.FAILED
    )
    expired = await started(sessions)
    await transition(sessions, lambda t: t.fail(expired, LEASE_EXPIRED))
    for run_id, error in ((by_worker, WORKER_STOPPED), (expired, LEASE_EXPIRED)):
        run, events = await run_and_events(sessions, run_id)
        assert (run.status, run.error_code, run.error) == (
            RunStatus.FAILED,
            error.code,
            error.message,
        )
        assert run.finished_at is not None and run.lease_holder is None
        last = status_event(events[-1])
        assert (last.status, last.error_code, last.error, last.final) == (
            "failed",
            error.code,
            error.message,
            True,
        )

    ended = [
        await cancelled(sessions),
        await _cancelled_while_running(sessions),
        await _cancel_requested_then_finished(sessions),
    ]
    for run_id in ended:
        run, events = await run_and_events(sessions, run_id)
        assert run.status == RunStatus.CANCELLED and run.cancel_requested
        assert run.error_code == "cancelled" and run.finished_at is not None
        assert run.resume_payload is None and run.lease_holder is None
        last = status_event(events[-1])
        assert (last.status, last.error_code, last.final) == ("cancelled", "cancelled", True)
        assert last.error is None  # the run row has the message; the event only the code


async def _cancelled_while_running(sessions: Sessions) -> uuid.UUID:
    run_id = await started(sessions)

    async def request_then_cancel(t: RunLeaseStatements) -> None:
        await t.request_cancel(run_id)
        await t.cancel(run_id, CANCELLED)

    await transition(sessions, request_then_cancel)
    return run_id


async def _cancel_requested_then_finished(sessions: Sessions) -> uuid.UUID:
    """A cancel requested while the worker ran: its outcome (not a completion) becomes cancel."""
    run_id = await started(sessions)
    await transition(sessions, lambda t: t.request_cancel(run_id))
    written = await finish(sessions, run_id, RunStatus.INTERRUPTED, interrupt=INTERRUPT)
    assert written == RunStatus.CANCELLED
    return run_id


async def test_a_requested_cancel_does_not_undo_a_completion(sessions: Sessions) -> None:
    run_id = await started(sessions)
    await transition(sessions, lambda t: t.request_cancel(run_id))
    assert await finish(sessions, run_id, RunStatus.COMPLETED) == RunStatus.COMPLETED
    run, _ = await run_and_events(sessions, run_id)
    assert run.status == RunStatus.COMPLETED


class _Abort(Exception):
    pass


async def test_status_and_event_commit_together_or_not_at_all(sessions: Sessions) -> None:
    run_id = await started(sessions)
    with pytest.raises(_Abort):
        async with sessions() as session, session.begin():
            await RunLeaseStatements(session).finish(
                run_id, HOLDER, RunStatus.COMPLETED, cancel_error=CANCELLED
            )
            # Inside the transaction both are written...
            status = await session.scalar(select(AgentRun.status).where(AgentRun.id == run_id))
            assert status == RunStatus.COMPLETED
            assert await _event_count(session, run_id) == 2
            # ...and a concurrent reader sees neither before the commit.
            before, before_events = await run_and_events(sessions, run_id)
            assert before.status == RunStatus.RUNNING and len(before_events) == 1
            raise _Abort  # the caller's transaction fails after the transition
    run, events = await run_and_events(sessions, run_id)
    assert run.status == RunStatus.RUNNING and len(events) == 1  # rolled back: neither stayed


async def _event_count(session: AsyncSession, run_id: uuid.UUID) -> int:
    count = await session.scalar(select(func.count()).where(RunEvent.run_id == run_id))
    return int(count or 0)


Transition = Callable[[RunLeaseStatements, uuid.UUID], Awaitable[Any]]


def _finish(status: RunStatus, **kw: Any) -> Transition:
    return lambda t, i: t.finish(i, HOLDER, status, cancel_error=CANCELLED, **kw)


ILLEGAL: list[tuple[str, Callable[[Sessions], Awaitable[uuid.UUID]], Transition]] = [
    ("complete an interrupted run", interrupted, _finish(RunStatus.COMPLETED)),
    ("fail an interrupted run", interrupted, lambda t, i: t.fail(i, LEASE_EXPIRED)),
    ("release an interrupted run", interrupted, lambda t, i: t.release(i, {"x": 1})),
    (
        "interrupt an interrupted run",
        interrupted,
        _finish(RunStatus.INTERRUPTED, interrupt=INTERRUPT),
    ),
    ("resume a running run", started, lambda t, i: t.resume(i, {"decisions": []})),
    ("resume a completed run", completed, lambda t, i: t.resume(i, {"decisions": []})),
    ("fail a completed run", completed, lambda t, i: t.fail(i, LEASE_EXPIRED)),
    ("finish a completed run again", completed, _finish(RunStatus.FAILED, error=LEASE_EXPIRED)),
    ("cancel a completed run", completed, lambda t, i: t.cancel(i, CANCELLED)),
    ("complete a cancelled run", cancelled, _finish(RunStatus.COMPLETED)),
    ("interrupt a cancelled run", cancelled, _finish(RunStatus.INTERRUPTED, interrupt=INTERRUPT)),
    ("request a cancel of an interrupted run", interrupted, lambda t, i: t.request_cancel(i)),
]


@pytest.mark.parametrize(
    ("setup", "change"), [(s, t) for _, s, t in ILLEGAL], ids=[n for n, _, _ in ILLEGAL]
)
async def test_an_illegal_transition_is_refused_and_writes_nothing(
    sessions: Sessions,
    setup: Callable[[Sessions], Awaitable[uuid.UUID]],
    change: Transition,
) -> None:
    run_id = await setup(sessions)
    before, before_events = await run_and_events(sessions, run_id)
    async with sessions() as session, session.begin():
        try:
            written = await change(RunLeaseStatements(session), run_id)
        except IllegalTransition:
            written = None
        assert written is None  # finish of a run not the holder's: nothing written
        assert await _event_count(session, run_id) == len(before_events)
    after, after_events = await run_and_events(sessions, run_id)
    assert after.status == before.status and after.finished_at == before.finished_at
    assert after.lease_holder == before.lease_holder
    assert [e.id for e in after_events] == [e.id for e in before_events]
