"""Runs in a given state, made by the run state machine itself (app/repositories/run_leases.py),
for tests of what happens to a run from there."""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.models import AgentRunRequest, Conversation, RequestStatus
from app.repositories.run_leases import RunLeaseStatements

#: The lease holder of the runs ``started`` makes.
HOLDER = "test-holder"

Sessions = async_sessionmaker[AsyncSession]


async def queued(sessions: Sessions) -> tuple[uuid.UUID, uuid.UUID]:
    """A fresh thread with one queued request: (thread id, request id)."""
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
    return conv.id, request.id


async def started(sessions: Sessions) -> uuid.UUID:
    """A fresh thread with one dispatched request and its running run, leased to ``HOLDER``
    (started by the claim's statement, the one home of a run's start)."""
    thread_id, request_id = await queued(sessions)
    async with sessions() as session, session.begin():
        run = await RunLeaseStatements(session).start_head(thread_id, HOLDER, 30)
        assert run is not None and run.request_id == request_id
        request = await session.get(AgentRunRequest, request_id, populate_existing=True)
        assert request is not None and request.status == RequestStatus.DISPATCHED
        return run.run_id
