"""A run's start, its finish and the claim of a run handed back are ONE statement each
(app/repositories/run_leases.py): the transaction boundaries a crash can fall on. The connection
is killed while each statement waits (its ``run_events`` insert blocked by a table lock), as a
crash of the worker or of its database connection at that point would: nothing of the statement
is stored, and the statement run again does its whole work once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.driver import driver
from app.db.models import (
    AgentRun,
    AgentRunRequest,
    RequestStatus,
    RunEvent,
    RunStatus,
)
from app.db.session import create_session_factory
from app.repositories.run_leases import RunLeaseStatements
from app.worker.errors import CANCELLED
from tests.support.runs import HOLDER, queued, started
from tests.support.statement_kill import kill_while_waiting

pytestmark = pytest.mark.integration


async def in_transaction(
    engine: AsyncEngine, work: Callable[[RunLeaseStatements], Awaitable[Any]]
) -> Any:
    """As the claim runs the start: in its transaction, on the driver."""
    async with driver(engine, transaction=True) as conn:
        return await work(RunLeaseStatements(conn))


async def in_autocommit(
    engine: AsyncEngine, work: Callable[[RunLeaseStatements], Awaitable[Any]]
) -> Any:
    """As the worker runs the finish: one statement in autocommit, on the driver."""
    async with driver(engine) as conn:
        return await work(RunLeaseStatements(conn))


async def test_a_start_killed_mid_statement_leaves_the_request_queued(
    engine: AsyncEngine, clean_db: str
) -> None:
    sessions = create_session_factory(engine)
    thread_id, request_id = await queued(sessions)

    def start(leases: RunLeaseStatements) -> Awaitable[Any]:
        return leases.start_head(thread_id, HOLDER, 30)

    await kill_while_waiting(clean_db, "run start", in_transaction(engine, start))

    async with sessions() as session:
        request = await session.get(AgentRunRequest, request_id)
        assert request is not None and request.status == RequestStatus.QUEUED
        assert await session.scalar(select(func.count()).select_from(AgentRun)) == 0
        assert await session.scalar(select(func.count()).select_from(RunEvent)) == 0

    got = await in_transaction(engine, start)
    assert got is not None and got.request_id == request_id
    async with sessions() as session:
        run = await session.get(AgentRun, got.run_id)
        assert run is not None and run.status == RunStatus.RUNNING
        assert run.lease_holder == HOLDER
        request = await session.get(AgentRunRequest, request_id)
        assert request is not None and request.status == RequestStatus.DISPATCHED
        events = (await session.scalars(select(RunEvent.type))).all()
        assert events == ["status"]
    # Started once: the queue is empty now.
    assert await in_transaction(engine, start) is None


async def test_a_finish_killed_mid_statement_leaves_the_run_leased(
    engine: AsyncEngine, clean_db: str
) -> None:
    sessions = create_session_factory(engine)
    run_id = await started(sessions)
    async with sessions() as session:
        events_before = await session.scalar(
            select(func.count()).select_from(RunEvent).where(RunEvent.run_id == run_id)
        )

    def finish(leases: RunLeaseStatements) -> Awaitable[Any]:
        return leases.finish(run_id, HOLDER, RunStatus.COMPLETED, cancel_error=CANCELLED)

    await kill_while_waiting(clean_db, "run finish", in_autocommit(engine, finish))

    async with sessions() as session:
        run = await session.get(AgentRun, run_id)
        assert run is not None
        assert (run.status, run.lease_holder, run.finished_at) == (RunStatus.RUNNING, HOLDER, None)
        assert (
            await session.scalar(
                select(func.count()).select_from(RunEvent).where(RunEvent.run_id == run_id)
            )
            == events_before
        )

    assert await in_autocommit(engine, finish) == RunStatus.COMPLETED
    async with sessions() as session:
        run = await session.get(AgentRun, run_id)
        assert run is not None and run.status == RunStatus.COMPLETED
        assert run.lease_holder is None and run.finished_at is not None
        finals = (
            await session.scalars(
                select(RunEvent.data).where(RunEvent.run_id == run_id, RunEvent.type == "status")
            )
        ).all()
        assert [e["status"] for e in finals][-1] == "completed"
        assert len(finals) == events_before + 1
    # Finished once: the lease is gone, a second finish writes nothing.
    assert await in_autocommit(engine, finish) is None


async def test_a_resumable_claim_killed_mid_statement_leaves_the_run_handed_back(
    engine: AsyncEngine, clean_db: str
) -> None:
    sessions = create_session_factory(engine)
    run_id = await started(sessions)
    marker = {"threadkeeper_handoff": {"holder": "gone-worker", "human": None}}
    async with sessions() as session, session.begin():
        await RunLeaseStatements(session).release(run_id, marker)

    def claim(leases: RunLeaseStatements) -> Awaitable[Any]:
        return leases.claim_resumable("next-worker", 30)

    await kill_while_waiting(clean_db, "run claim_resumable", in_autocommit(engine, claim))

    async with sessions() as session:
        run = await session.get(AgentRun, run_id)
        assert run is not None
        assert (run.lease_holder, run.resume_payload) == (None, marker)

    got = await in_autocommit(engine, claim)
    assert got is not None and got.run_id == run_id and got.payload == marker
    async with sessions() as session:
        run = await session.get(AgentRun, run_id)
        assert run is not None
        assert (run.lease_holder, run.resume_payload) == ("next-worker", None)
    # Claimed once: nothing is handed back any more.
    assert await in_autocommit(engine, claim) is None
