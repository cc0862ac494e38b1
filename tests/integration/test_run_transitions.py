"""RunRepository's status transitions, the one writer of a run's status, on real PostgreSQL.

Each transition writes the run's status and its typed ``status`` event in the caller's
transaction (both commit or neither does), and a change the state machine does not allow is
refused with nothing written.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.models import (
    AgentRun,
    AgentRunRequest,
    Conversation,
    RequestStatus,
    RunEvent,
    RunStatus,
)
from app.db.run_events import StatusEvent
from app.db.session import create_engine, create_session_factory
from app.repositories.run_leases import RunLeaseStatements
from app.repositories.runs import IllegalTransition, RunRepository
from app.worker.errors import CANCELLED, LEASE_EXPIRED

pytestmark = pytest.mark.integration

HOLDER = "test-holder"
INTERRUPT = {"action_requests": [{"name": "search", "args": {"q": "x"}}]}

Sessions = async_sessionmaker[AsyncSession]


@pytest.fixture
async def sessions(clean_db: str) -> AsyncIterator[Sessions]:
    engine = create_engine(clean_db)
    try:
        yield create_session_factory(engine)
    finally:
        await engine.dispose()


async def started(sessions: Sessions) -> uuid.UUID:
    """A fresh thread with one dispatched request and its running, leased run (started by the
    claim's statement, the one home of a run's start)."""
    async with sessions() as session, session.begin():
        conv = Conversation(id=uuid.uuid4(), owner_id="alice")
        session.add(conv)
        await session.flush()
        # The request as intake queued it (intake itself is one SQL statement on its own
        # connection: tests/integration/test_requests_api.py covers it).
        request = AgentRunRequest(
            id=uuid.uuid4(),
            thread_id=conv.id,
            seq=1,
            payload={"content": "hi", "lc_id": "h1"},
            status=RequestStatus.QUEUED,
        )
        session.add(request)
        await session.flush()
        run = await RunLeaseStatements(session).start_head(conv.id, HOLDER, 30)
        assert run is not None and run.request_id == request.id
        assert (await session.get(AgentRunRequest, request.id, populate_existing=True)).status == (
            RequestStatus.DISPATCHED
        )
        return run.run_id


async def interrupted(sessions: Sessions) -> uuid.UUID:
    run_id = await started(sessions)
    async with sessions() as session, session.begin():
        await RunRepository(session).interrupt(run_id, INTERRUPT)
    return run_id


async def completed(sessions: Sessions) -> uuid.UUID:
    run_id = await started(sessions)
    async with sessions() as session, session.begin():
        await RunRepository(session).complete(run_id)
    return run_id


async def cancelled(sessions: Sessions) -> uuid.UUID:
    run_id = await interrupted(sessions)
    async with sessions() as session, session.begin():
        await RunRepository(session).cancel(run_id, CANCELLED)
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
    last = status_event(events[-1])
    assert last.status == "interrupted" and not last.final
    assert msgspec.to_builtins(last.interrupt) == {
        "action_requests": [{"name": "search", "args": {"q": "x"}, "description": None}],
        "review_configs": [],
    }

    decisions = {"decisions": [{"type": "approve"}]}
    async with sessions() as session, session.begin():
        await RunRepository(session).resume(run_id, decisions)
    run, events = await run_and_events(sessions, run_id)
    assert run.status == RunStatus.RUNNING and run.interrupt is None
    assert run.resume_payload == decisions and run.lease_holder is None
    assert status_event(events[-1]).status == "resumed"

    async with sessions() as session, session.begin():
        claimed = await RunRepository(session).claim_resumable("other-holder", 30)
    assert claimed is not None
    assert claimed[0].id == run_id and claimed[1] == decisions
    run, events = await run_and_events(sessions, run_id)
    assert run.lease_holder == "other-holder" and run.resume_payload is None
    assert status_event(events[-1]).status == "running"


async def test_release_hands_the_run_back_with_a_handoff_event(sessions: Sessions) -> None:
    run_id = await started(sessions)
    marker = {"threadkeeper_handoff": {"holder": HOLDER, "human": None}}
    async with sessions() as session, session.begin():
        await RunRepository(session).release(run_id, marker)
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

    failing = await started(sessions)
    async with sessions() as session, session.begin():
        await RunRepository(session).fail(failing, LEASE_EXPIRED)
    run, events = await run_and_events(sessions, failing)
    assert (run.status, run.error_code, run.error) == (
        RunStatus.FAILED,
        "lease_expired",
        LEASE_EXPIRED.message,
    )
    last = status_event(events[-1])
    assert (last.status, last.error_code, last.error, last.final) == (
        "failed",
        "lease_expired",
        LEASE_EXPIRED.message,
        True,
    )

    for run_id in (await cancelled(sessions), await _cancelled_while_running(sessions)):
        run, events = await run_and_events(sessions, run_id)
        assert run.status == RunStatus.CANCELLED and run.cancel_requested
        assert run.error_code == "cancelled" and run.finished_at is not None
        assert run.resume_payload is None and run.lease_holder is None
        last = status_event(events[-1])
        assert (last.status, last.error_code, last.final) == ("cancelled", "cancelled", True)
        assert last.error is None  # the run row has the message; the event only the code


async def _cancelled_while_running(sessions: Sessions) -> uuid.UUID:
    run_id = await started(sessions)
    async with sessions() as session, session.begin():
        await RunRepository(session).request_cancel(run_id)
        await RunRepository(session).cancel(run_id, CANCELLED)
    return run_id


class _Abort(Exception):
    pass


async def test_status_and_event_commit_together_or_not_at_all(sessions: Sessions) -> None:
    run_id = await started(sessions)
    with pytest.raises(_Abort):
        async with sessions() as session, session.begin():
            await RunRepository(session).complete(run_id)
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


Transition = Callable[[RunRepository, uuid.UUID], Awaitable[Any]]

ILLEGAL: list[tuple[str, Callable[[Sessions], Awaitable[uuid.UUID]], Transition]] = [
    ("complete an interrupted run", interrupted, lambda r, i: r.complete(i)),
    ("fail an interrupted run", interrupted, lambda r, i: r.fail(i, LEASE_EXPIRED)),
    ("release an interrupted run", interrupted, lambda r, i: r.release(i, {"x": 1})),
    ("interrupt an interrupted run", interrupted, lambda r, i: r.interrupt(i, INTERRUPT)),
    ("resume a running run", started, lambda r, i: r.resume(i, {"decisions": []})),
    ("resume a completed run", completed, lambda r, i: r.resume(i, {"decisions": []})),
    ("fail a completed run", completed, lambda r, i: r.fail(i, LEASE_EXPIRED)),
    ("cancel a completed run", completed, lambda r, i: r.cancel(i, CANCELLED)),
    ("complete a cancelled run", cancelled, lambda r, i: r.complete(i)),
    ("interrupt a cancelled run", cancelled, lambda r, i: r.interrupt(i, INTERRUPT)),
    ("request a cancel of an interrupted run", interrupted, lambda r, i: r.request_cancel(i)),
]


@pytest.mark.parametrize(
    ("setup", "transition"), [(s, t) for _, s, t in ILLEGAL], ids=[n for n, _, _ in ILLEGAL]
)
async def test_an_illegal_transition_is_refused_and_writes_nothing(
    sessions: Sessions,
    setup: Callable[[Sessions], Awaitable[uuid.UUID]],
    transition: Transition,
) -> None:
    run_id = await setup(sessions)
    before, before_events = await run_and_events(sessions, run_id)
    async with sessions() as session, session.begin():
        with pytest.raises(IllegalTransition):
            await transition(RunRepository(session), run_id)
        assert await _event_count(session, run_id) == len(before_events)
    after, after_events = await run_and_events(sessions, run_id)
    assert after.status == before.status and after.finished_at == before.finished_at
    assert [e.id for e in after_events] == [e.id for e in before_events]
