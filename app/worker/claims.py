"""Which run a worker takes next: queued input of an idle thread (FIFO per thread, fair across
threads: app/repositories/claim_queue.py), a run handed back (resumed or released), and the
housekeeping of the claim loop (expired leases, old events).

Mutual exclusion comes from the Conversation row lock taken at claim time plus the partial unique
index "one running/interrupted run per thread", never from LangGraph, which has no thread lock.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import structlog
from langchain_core.messages import HumanMessage
from langgraph.types import Command
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app import metrics
from app.db.driver import driver
from app.db.run_events import GRAPH_STREAM_MODES
from app.domain.agents import DEFAULT_AGENT_ID
from app.repositories.claim_queue import ClaimQueueRepository
from app.repositories.run_events import RunEventRepository
from app.repositories.run_leases import RunLeaseStatements
from app.repositories.runs import RunRepository
from app.worker.errors import LEASE_EXPIRED, SUPERSEDED

log = structlog.get_logger(__name__)

#: Event rows deleted per pruning transaction (keeps each one short).
PRUNE_BATCH = 5000
#: ``resume_payload`` key of a run released by a draining worker (running, no lease holder).
HANDOFF_KEY = "threadkeeper_handoff"
#: Looks at the queue per ``claim_next`` when the thread found is taken by another worker first.
CLAIM_ATTEMPTS = 3
_LOCKED, _LOST = object(), object()


@dataclass(frozen=True, slots=True)
class Handoff:
    """Graph input of a released run: continue from its last checkpoint.

    ``human`` is the run's user message when the run started from one: if the release came
    before that input reached the checkpoint, the run starts over from it instead.
    """

    human: HumanMessage | None


@dataclass(frozen=True, slots=True)
class ClaimedRun:
    run_id: uuid.UUID
    thread_id: uuid.UUID
    owner_id: str
    #: ``{"messages": [human]}`` (new input), ``Command(resume=...)`` (a human's decisions) or
    #: ``Handoff`` (released by a draining worker).
    graph_input: Any
    #: The thread's agent (``app.agents.registry``).
    agent_id: str = DEFAULT_AGENT_ID
    #: New input after a run that did not complete (failed, cancelled, killed) may find tool
    #: calls without results in the checkpoint: look for them first (app/worker/repair.py).
    #: After a completed run (the graph reached its end) there are none, and the look (a
    #: checkpoint read) is skipped.
    repair: bool = True
    #: A run from an earlier checkpoint (issue 36): where it starts, and its version tag.
    fork: ForkStart | None = None
    #: The thread's previous run was superseded by new input while it waited for a human:
    #: its pending tool calls are answered as cancelled by the user's new message.
    superseded: bool = False
    #: What the run's request asked of the graph (a LangGraph run's ``config.configurable``,
    #: ``context`` and the stream modes only the graph can produce).
    options: GraphOptions = field(default_factory=lambda: GraphOptions())


@dataclass(frozen=True, slots=True)
class GraphOptions:
    configurable: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] | None = None
    stream_modes: tuple[str, ...] = ()


def options_of(payload: dict[str, Any]) -> GraphOptions:
    configurable = payload.get("configurable")
    context = payload.get("context")
    modes = [m for m in payload.get("stream_mode") or [] if m in GRAPH_STREAM_MODES]
    return GraphOptions(
        configurable=dict(configurable) if isinstance(configurable, dict) else {},
        context=dict(context) if isinstance(context, dict) else None,
        stream_modes=tuple(dict.fromkeys(modes)),
    )


@dataclass(frozen=True, slots=True)
class ForkStart:
    checkpoint_id: str
    #: The fork's channel-version tag (app/db/checkpoint_codec.py: no version reused).
    tag: str
    #: The thread's head when the fork was asked for: while it is still the head, the fork
    #: wrote nothing yet (an outage retry starts it over from ``checkpoint_id``).
    head: str | None = None


def fork_of(payload: dict[str, Any]) -> ForkStart | None:
    fork = payload.get("fork")
    if not isinstance(fork, dict):
        return None
    head = fork.get("head")
    return ForkStart(str(fork["checkpoint_id"]), str(fork["tag"]), str(head) if head else None)


def human_of(graph_input: Any) -> HumanMessage | None:
    """The user message a run answers, if its input carries one."""
    if isinstance(graph_input, Handoff):
        return graph_input.human
    if isinstance(graph_input, dict):
        found = [m for m in graph_input.get("messages", []) if isinstance(m, HumanMessage)]
        return found[0] if found else None
    return None


def handoff_marker(holder: str, graph_input: Any) -> dict[str, Any]:
    """The ``resume_payload`` of a released run: who let go, and the input it started from."""
    human = human_of(graph_input)
    return {
        HANDOFF_KEY: {
            "holder": holder,
            "human": {"content": human.content, "lc_id": human.id} if human else None,
        }
    }


def _graph_input_of(payload: Any) -> Any:
    """What a claimed handed-back run continues with: a human's decisions, or a handoff."""
    if isinstance(payload, dict) and HANDOFF_KEY in payload:
        human = payload[HANDOFF_KEY].get("human")
        return Handoff(HumanMessage(content=human["content"], id=human["lc_id"]) if human else None)
    return Command(resume=payload)


class RunClaims:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        holder: str,
        lease_seconds: float,
        retention_seconds: float,
        *,
        engine: AsyncEngine,
    ) -> None:
        self.sessions = sessions
        #: The sessions' engine: one-statement writes need no ORM session, only a connection.
        self.engine = engine
        self.holder = holder
        self.lease_seconds = lease_seconds
        self.retention_seconds = retention_seconds
        #: The last ``claim_next`` saw claimable threads but could take none of them.
        self.contended = False
        #: Seconds from the last ``recover_expired`` to the next lease expiry (None: no lease).
        self.next_expiry_in: float | None = None
        #: Runs handed back may wait: set at start and by each look at the queue that saw one,
        #: cleared by a ``claim_resumable`` that found none (a look costs a statement per round).
        self.handed_back = True
        #: The last claim's look saw other threads ready besides the one it took (or runs
        #: handed back wait): worth another look right away. False after a look that took the
        #: only ready thread: another look would find nothing (new input notifies).
        self.more_ready = True

    async def claim_next(self) -> ClaimedRun | None:
        """Oldest queued input of the idle thread ready longest -> a running run.

        Sets ``contended`` when idle threads with queued input were seen but none could be
        taken (each held by another transaction at that instant): look again soon.
        """
        self.contended = False
        for _ in range(CLAIM_ATTEMPTS):
            outcome = await self._claim_once()
            if outcome is None or isinstance(outcome, ClaimedRun):
                return outcome
            if outcome is _LOCKED:
                break
        self.contended = True
        return None

    async def _claim_once(self) -> ClaimedRun | object | None:
        """A claimed run; None when nothing is claimable; ``_LOCKED`` when every candidate was
        held by another transaction; ``_LOST`` when another worker took the thread first."""
        try:
            async with driver(self.engine, transaction=True) as conn:
                queue = ClaimQueueRepository(conn)
                picked = await queue.pick_thread()
                self.handed_back = self.handed_back or picked.handed_back
                if picked.thread_id is None or picked.owner_id is None:
                    return _LOCKED if picked.ready else None
                self.more_ready = picked.ready > 1 or self.handed_back
                run = await RunLeaseStatements(conn).start_head(
                    picked.thread_id, self.holder, self.lease_seconds
                )
                if run is None:
                    return _LOST
                payload = run.payload
                fork = fork_of(payload)
                graph_input: Any = None  # Regenerate: the answer again from the checkpoint
                if payload.get("content") is not None:
                    human = HumanMessage(content=payload["content"], id=payload["lc_id"])
                    graph_input = {"messages": [human]}
                return ClaimedRun(
                    run.run_id,
                    picked.thread_id,
                    picked.owner_id,
                    graph_input,
                    picked.agent_id or DEFAULT_AGENT_ID,
                    # A fork starts from a turn boundary, never a dangling call.
                    repair=fork is None and picked.previous_status != "completed",
                    fork=fork,
                    superseded=picked.previous_error == SUPERSEDED.code,
                    options=options_of(payload),
                )
        except asyncpg.IntegrityConstraintViolationError:  # the claim runs on the driver
            # Belt and braces: the partial unique index "one active run per thread" refused.
            log.info("claim_lost_race")
            return _LOST

    async def claim_resumable(self) -> ClaimedRun | None:
        """A run handed back (resumed by a human, or released by a draining worker): one
        statement in autocommit (app/repositories/run_leases.py)."""
        async with driver(self.engine) as conn:
            claimed = await RunLeaseStatements(conn).claim_resumable(
                self.holder, self.lease_seconds
            )
        if claimed is None:
            self.handed_back = False
            return None
        self.more_ready = True  # more may have been handed back
        graph_input = _graph_input_of(claimed.payload)
        if isinstance(graph_input, Handoff):
            log.info("run_taken_over", run_id=str(claimed.run_id), holder=self.holder)
        return ClaimedRun(
            claimed.run_id,
            claimed.thread_id,
            claimed.owner_id,
            graph_input,
            claimed.agent_id,
            options=options_of(claimed.request_payload),
        )

    async def recover_expired(self) -> int:
        """Runs whose worker vanished: fail them (their input is not replayed: tools may have run).

        Also notes in ``next_expiry_in`` when the next lease can run out (None: none held), so
        an idle claim loop checks again then, not on every poll."""
        async with self.sessions() as session, session.begin():
            expired = await RunRepository(session).expired()
            for run in expired:
                await RunLeaseStatements(session).fail(run.id, LEASE_EXPIRED)
                log.warning("run_lease_recovered", run_id=str(run.id))
                metrics.LEASE_RECOVERIES.inc()
            self.next_expiry_in = await ClaimQueueRepository(session).seconds_to_next_expiry()
            return len(expired)

    async def announce(self) -> None:
        """Wake every worker (NOTIFY): work this one will not take is up for grabs."""
        async with self.sessions() as session, session.begin():
            await RunRepository(session).announce_work()

    async def prune_run_events(self) -> int:
        """Delete the events of runs finished more than the retention period ago (in batches,
        each its own short transaction); returns how many rows went."""
        if self.retention_seconds <= 0:
            return 0
        total = 0
        while True:
            async with self.sessions() as session, session.begin():
                deleted = await RunEventRepository(session).prune_finished(
                    older_than_seconds=self.retention_seconds, limit=PRUNE_BATCH
                )
            total += deleted
            if deleted < PRUNE_BATCH:
                break
        if total:
            log.info("run_events_pruned", rows=total)
        return total
