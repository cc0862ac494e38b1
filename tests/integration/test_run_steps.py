"""A graph step's writes are ONE statement (app/repositories/run_steps.py): the transaction
boundary a crash can fall on. Either the whole step is stored (messages, usage, events, in
order) or nothing is; a step written again after a crash or an outage stores nothing twice; a
run whose lease is gone writes nothing at all."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.models import AgentRun, Conversation, Message, RunEvent, RunStatus
from app.db.run_events import DeltaEvent
from app.db.session import create_session_factory
from app.worker.ledger import LeaseLost, RunLedger
from tests.support.runs import HOLDER, Sessions, started
from tests.support.statement_kill import kill_while_waiting

pytestmark = pytest.mark.integration


def reply() -> AIMessage:
    return AIMessage(
        content="",
        id="ai-1",
        tool_calls=[{"id": "call-1", "name": "query_kb", "args": {"query": "lease"}}],
        usage_metadata={"input_tokens": 11, "output_tokens": 7, "total_tokens": 18},
    )


async def thread_of(sessions: Sessions, run_id: uuid.UUID) -> uuid.UUID:
    async with sessions() as session:
        run = await session.get(AgentRun, run_id)
        assert run is not None
        return run.thread_id


async def stored(sessions: Sessions, run_id: uuid.UUID) -> tuple[list[Message], list[RunEvent]]:
    async with sessions() as session:
        messages = (
            await session.scalars(
                select(Message).where(Message.run_id == run_id).order_by(Message.seq)
            )
        ).all()
        events = (
            await session.scalars(
                select(RunEvent)
                .where(RunEvent.run_id == run_id, RunEvent.type != "status")
                .order_by(RunEvent.id)
            )
        ).all()
        return list(messages), list(events)


async def test_a_step_stores_messages_usage_and_events_in_order_once(engine: AsyncEngine) -> None:
    sessions = create_session_factory(engine)
    run_id = await started(sessions)
    tid = await thread_of(sessions, run_id)
    ledger = RunLedger(sessions, HOLDER, 30, engine=engine)
    delta = DeltaEvent(type="delta", lc_id="ai-1", text="thinking")
    tool = ToolMessage(content="{}", tool_call_id="call-1", name="query_kb", id="tool-1")

    await ledger.persist_update(tid, run_id, {"messages": [reply()]}, [delta])
    # The same step again (a retry after an outage, a replay after a crash) plus the next one:
    # only the new message is stored, usage is not counted twice.
    await ledger.persist_update(tid, run_id, {"messages": [reply(), tool]})

    messages, events = await stored(sessions, run_id)
    assert [(m.role, m.lc_id) for m in messages] == [("assistant", "ai-1"), ("tool", "tool-1")]
    assert messages[1].seq == messages[0].seq + 1
    assert messages[0].tool_calls == [
        {"id": "call-1", "name": "query_kb", "args": {"query": "lease"}}
    ]
    # The delta streamed before the message; one message event per stored message, with its seq.
    assert [e.type for e in events] == ["delta", "message", "message"]
    assert [e.data["seq"] for e in events[1:]] == [m.seq for m in messages]
    assert [e.data["message_id"] for e in events[1:]] == [str(m.id) for m in messages]
    async with sessions() as session:
        run = await session.get(AgentRun, run_id)
        conv = await session.get(Conversation, tid)
        assert run is not None and conv is not None
        assert (run.input_tokens, run.output_tokens, run.model_calls) == (11, 7, 1)
        assert conv.next_message_seq == messages[-1].seq + 1


@pytest.mark.parametrize("lost", ["recovered", "taken_over"])
async def test_a_step_of_a_run_no_longer_leased_writes_nothing(
    engine: AsyncEngine, lost: str
) -> None:
    """The lease check is part of the statement: a run recovered elsewhere (lease expired,
    failed) or handed to another worker stores no message, no usage, no event."""
    sessions = create_session_factory(engine)
    run_id = await started(sessions)
    tid = await thread_of(sessions, run_id)
    values = (
        {"status": RunStatus.FAILED, "lease_holder": None}
        if lost == "recovered"
        else {"lease_holder": "another-worker"}
    )
    async with sessions() as session, session.begin():
        await session.execute(update(AgentRun).where(AgentRun.id == run_id).values(**values))

    ledger = RunLedger(sessions, HOLDER, 30, engine=engine)
    delta = DeltaEvent(type="delta", lc_id="ai-1", text="x")
    with pytest.raises(LeaseLost):
        await ledger.persist_update(tid, run_id, {"messages": [reply()]}, [delta])
    with pytest.raises(LeaseLost):
        await ledger.check_lease(tid, run_id)

    messages, events = await stored(sessions, run_id)
    assert messages == [] and events == []
    async with sessions() as session:
        run = await session.get(AgentRun, run_id)
        conv = await session.get(Conversation, tid)
        assert run is not None and conv is not None
        assert (run.input_tokens, run.model_calls) == (0, 0)
        assert conv.next_message_seq == 1


async def test_a_step_killed_mid_statement_leaves_nothing_and_goes_again(
    engine: AsyncEngine, clean_db: str
) -> None:
    """The connection dies while the step statement waits (a crash at this boundary): nothing
    of the step is stored, and writing the step again stores it whole, once."""
    sessions = create_session_factory(engine)
    run_id = await started(sessions)
    tid = await thread_of(sessions, run_id)
    ledger = RunLedger(sessions, HOLDER, 30, engine=engine)
    await kill_while_waiting(
        clean_db, "run step", ledger.persist_update(tid, run_id, {"messages": [reply()]})
    )

    assert await stored(sessions, run_id) == ([], [])
    await ledger.persist_update(tid, run_id, {"messages": [reply()]})
    messages, events = await stored(sessions, run_id)
    assert [m.lc_id for m in messages] == ["ai-1"]
    assert [e.type for e in events] == ["message"]


async def test_a_lease_check_locks_nothing(engine: AsyncEngine) -> None:
    """A step with nothing to write only reads the lease: it neither waits for the thread's or
    the run's row lock (held here by another transaction) nor takes one (a WAL record each)."""
    sessions = create_session_factory(engine)
    run_id = await started(sessions)
    tid = await thread_of(sessions, run_id)
    ledger = RunLedger(sessions, HOLDER, 30, engine=engine)  # a locking check would wait up to 30 s
    async with sessions() as session, session.begin():
        await session.execute(
            select(Conversation.id).where(Conversation.id == tid).with_for_update()
        )
        await session.execute(select(AgentRun.id).where(AgentRun.id == run_id).with_for_update())
        await asyncio.wait_for(ledger.check_lease(tid, run_id), 5)
    async with sessions() as session, session.begin():
        await session.execute(
            update(AgentRun).where(AgentRun.id == run_id).values(lease_holder="x")
        )
    with pytest.raises(LeaseLost):
        await ledger.check_lease(tid, run_id)
