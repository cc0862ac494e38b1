"""A run that lost its database connection: wait for the database (within the lease), then go
on from the last checkpoint rather than fail the turn."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.types import Command
from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_exponential

from app.db.errors import is_connection_error
from app.repositories.agent_state import AgentStateRepository, AgentStateSnapshot
from app.worker.claims import ClaimedRun, human_of
from app.worker.ledger import RunLedger, interrupt_payload
from app.worker.repair import repair_dangling_tool_calls

#: Times a run that lost its database connection goes on from its last checkpoint.
DATABASE_RETRIES = 3


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """Where a run goes on after an outage: ``again`` with ``graph_input``, or it has ended
    (at ``interrupt`` when it reached one)."""

    again: bool
    graph_input: Any = None
    interrupt: Any = None


class DatabaseWait:
    def __init__(self, ledger: RunLedger, lease_seconds: float) -> None:
        self.ledger = ledger
        self.lease_seconds = lease_seconds
        #: Runs waiting for the database to answer again before they go on (observability).
        self.waiting: set[uuid.UUID] = set()

    async def snapshot(
        self, run_id: uuid.UUID, thread_id: uuid.UUID, state: AgentStateRepository
    ) -> tuple[AgentStateSnapshot, AgentStateSnapshot]:
        """The thread's live and committed state once both pools answer again (and the lease is
        still ours); re-raises the connection error after ``lease_seconds`` of waiting."""
        retrying = AsyncRetrying(
            retry=retry_if_exception(is_connection_error),  # LeaseLost and the rest: at once
            wait=wait_exponential(multiplier=0.1, max=2.0),
            stop=stop_after_delay(self.lease_seconds),
            reraise=True,
        )
        self.waiting.add(run_id)
        try:
            return await retrying(self._read, run_id, thread_id, state)
        finally:
            self.waiting.discard(run_id)

    async def _read(
        self, run_id: uuid.UUID, thread_id: uuid.UUID, state: AgentStateRepository
    ) -> tuple[AgentStateSnapshot, AgentStateSnapshot]:
        # The session pool answers, the run is ours; then the checkpointer's state too.
        await self.ledger.check_lease(thread_id, run_id)
        return await state.get_live_and_committed(thread_id)

    async def resume_point(
        self, claimed: ClaimedRun, waiting: frozenset[str], state: AgentStateRepository
    ) -> ResumePoint:
        """After a lost connection: where the run goes on, from the last saved checkpoint
        (``state``: read through the thread's agent graph).

        Messages the graph produced but the outage kept out of the history are stored first
        (idempotent on their ids). Steps whose checkpoint was not written run again (LangGraph
        keeps the writes of finished tasks). ``waiting``: the interrupts a resumed run answers.
        """
        snapshot, committed = await self.snapshot(claimed.run_id, claimed.thread_id, state)
        view = snapshot.messages
        await self.ledger.persist_update(claimed.thread_id, claimed.run_id, {"messages": view})
        pending = snapshot.interrupts
        if isinstance(claimed.graph_input, Command):
            if pending and {str(i.id) for i in pending} == waiting:
                return ResumePoint(True, claimed.graph_input)  # the answer was not consumed yet
        else:
            human = human_of(claimed.graph_input)
            if human is not None and not any(m.id == human.id for m in view):
                return ResumePoint(True, {"messages": [human]})  # the input itself was never saved
        if pending:
            return ResumePoint(False, interrupt=interrupt_payload(pending))  # a new interrupt
        if committed.next:
            # Go on from the last checkpoint: its step runs again, except the tasks whose writes
            # were saved (LangGraph applies those). The live view would call such a step done
            # (a model reply with tool calls and no checkpoint after it), and restarting the
            # graph on it would send the provider the calls without their results.
            return ResumePoint(True)
        last = view[-1] if view else None
        if not (isinstance(last, AIMessage) and not last.tool_calls):
            # The checkpoint says "done" but the turn has no final answer (the outage ended the
            # graph after a tool step): start the graph again on the saved messages, every
            # tool call in them answered first.
            await repair_dangling_tool_calls(state, self.ledger, claimed.thread_id, claimed.run_id)
            return ResumePoint(True, {"messages": []})
        return ResumePoint(False)  # the graph had finished
