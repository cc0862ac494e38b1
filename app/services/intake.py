"""Intake: a user message becomes a persisted Message plus a queued run request, atomically."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from app.agents.registry import AgentRegistry
from app.db.models import RunStatus
from app.db.session import autocommit
from app.domain.errors import AgentMismatch, IdempotencyKeyReused, NotFound, ThreadBusy
from app.repositories.branches import BranchRepository
from app.repositories.conversations import ConversationRepository
from app.repositories.intake import AcceptedRow, IntakeRepository
from app.repositories.run_leases import RunLeaseStatements
from app.repositories.runs import RunRepository
from app.services.forks import ForkAsk, fork_point
from app.worker.errors import SUPERSEDED


@dataclass(frozen=True, slots=True)
class Accepted:
    request_id: uuid.UUID
    message_id: uuid.UUID
    seq: int
    #: A fork: the branch it made the thread's current one.
    branch_id: uuid.UUID | None = None
    #: The run that waited for a human answer and this input superseded (ended, cancelled).
    superseded_run_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class RunAsk:
    """A run asked for with new input (the LangGraph door's runs; /v1's PostMessage is one with
    only ``content``)."""

    content: str
    #: The agent the run names: it chooses the agent of a thread that has none chosen yet, and
    #: is refused (``agent_mismatch``) on a thread fixed to another.
    agent_id: str | None = None
    #: The user message's LangChain id, when the client chose it.
    lc_id: str | None = None
    #: Refused (``thread_busy``) unless the thread is idle, checked under the row lock.
    only_if_idle: bool = False
    #: More of the request's payload (e.g. the stream modes a LangGraph run named).
    extra: Mapping[str, Any] = field(default_factory=dict)


def body_fingerprint(content: str) -> str:
    """SHA-256 of the PostMessage body's meaning (not its bytes: key order or spacing may vary)."""
    return hashlib.sha256(json.dumps({"content": content}).encode()).hexdigest()


class IntakeService:
    def __init__(
        self,
        engine: AsyncEngine,
        lock_timeout_ms: int,
        on_enqueued: Callable[[], None] | None = None,
        agents: AgentRegistry | None = None,
    ) -> None:
        self.engine = engine
        self.lock_timeout_ms = lock_timeout_ms
        self.on_enqueued = on_enqueued
        #: Refuses input for an agent that cannot run now (409 ``agent_unavailable``).
        self.agents = agents

    async def post_message(
        self,
        thread_id: uuid.UUID,
        owner_id: str,
        content: str,
        *,
        idempotency_key: str | None = None,
    ) -> Accepted:
        """Lock the thread row (the lock compress holds too), then message + request: the whole
        write is one statement (the hot path: PostMessage is hundreds per second per core).

        With an ``idempotency_key`` already used on this thread (looked up under the same lock,
        so two concurrent retries cannot both insert): the same body gets the first request
        back and nothing is written; another body is refused.

        On a thread whose run waits for a human answer (and whose agent does not queue behind
        it), the statement writes nothing and names that run: ``_superseding`` then ends it and
        writes the message in one transaction.
        """
        fingerprint = body_fingerprint(content) if idempotency_key is not None else None
        # One statement is its own transaction: autocommit saves the BEGIN and COMMIT round trips
        # (the statement commits or fails whole). A bare connection, no ORM Session: it has no
        # objects to track, and setting one up cost a tenth of PostMessage's CPU.
        async with autocommit(self.engine) as conn:
            if self.agents is not None and self.agents.unavailable():
                # Only while some agent is down (an MCP server that does not answer): one more
                # query, so a post its agent cannot run is refused rather than failed later.
                agent_id = await IntakeRepository(conn).agent_of(thread_id, owner_id)
                if agent_id is not None:
                    self.agents.require_available(agent_id)
            row = await IntakeRepository(conn).accept_user_message(
                thread_id,
                owner_id,
                content,
                lock_timeout_ms=self.lock_timeout_ms,
                idempotency_key=idempotency_key,
                fingerprint=fingerprint,
                supersede=True,
                queueing=self._queueing(),
            )
        if row.waiting_run is not None:
            waiting = row.waiting_run
            row = await self._superseding(
                thread_id,
                owner_id,
                waiting,
                lambda repo, extra: repo.accept_user_message(
                    thread_id,
                    owner_id,
                    content,
                    lock_timeout_ms=self.lock_timeout_ms,
                    idempotency_key=idempotency_key,
                    fingerprint=fingerprint,
                    extra=extra,
                ),
            )
        if row.replayed and row.fingerprint != fingerprint:
            raise IdempotencyKeyReused(
                "this Idempotency-Key was used on this thread with another body"
            )
        return self._accepted(row)

    async def post_run(self, thread_id: uuid.UUID, owner_id: str, ask: RunAsk) -> Accepted:
        """New input as a run: the thread's agent checked (chosen on first use, then fixed),
        then message + queued request as ``post_message`` writes them (superseding a run that
        waits for a human answer, as there); ``only_if_idle`` takes the row lock first and
        writes only if the thread is idle (THE busy answer, ``ConversationRepository.status``)
        or only waits for a human answer (superseded), in one transaction."""
        async with autocommit(self.engine) as conn:
            repo = IntakeRepository(conn)
            agent_id = await self._agent_for_run(repo, thread_id, owner_id, ask.agent_id)
            if self.agents is not None:
                self.agents.require_available(agent_id)
            fast = None
            if not ask.only_if_idle:
                fast = await self._accept(repo, thread_id, owner_id, ask, supersede=True)
        if fast is not None and fast.waiting_run is None:
            return self._accepted(fast)
        if fast is not None and fast.waiting_run is not None:
            return self._accepted(
                await self._superseding(
                    thread_id,
                    owner_id,
                    fast.waiting_run,
                    lambda repo, extra: self._accept(
                        repo, thread_id, owner_id, ask, extra={**ask.extra, **extra}
                    ),
                )
            )
        async with AsyncSession(self.engine) as session, session.begin():
            conversations = ConversationRepository(session)
            await conversations.lock(thread_id, owner_id=owner_id, timeout_ms=self.lock_timeout_ms)
            status = await conversations.status(thread_id)
            superseded: uuid.UUID | None = None
            if status == "interrupted" and agent_id not in self._queueing():
                # Only a run waiting for a human answer: new input supersedes it (not busy).
                superseded = await self._supersede(session, thread_id)
            elif status != "idle":
                raise ThreadBusy("the thread has a run or queued input")
            repo = IntakeRepository(await session.connection())
            extra = {"supersedes": str(superseded)} if superseded is not None else {}
            row = await self._accept(repo, thread_id, owner_id, ask, extra={**ask.extra, **extra})
        return self._accepted(row, superseded)

    async def fork(self, thread_id: uuid.UUID, owner_id: str, ask: ForkAsk) -> Accepted:
        """A run from an earlier checkpoint (app/services/forks.py): under the row lock, only
        on an idle thread (else ``thread_busy``, like any intake), the checkpoint checked, a new
        branch made the thread's current one, then the run request (Edit: with its message,
        written on the new branch) in the same transaction. The worker runs it from that
        checkpoint; the replaced branch stays readable."""
        if self.agents is None:
            raise AssertionError("forking needs the agent registry")
        async with autocommit(self.engine) as conn:
            agent_id = await self._agent_for_run(
                IntakeRepository(conn), thread_id, owner_id, ask.agent_id
            )
        self.agents.require_available(agent_id)
        states = self.agents.state_of(agent_id)
        async with AsyncSession(self.engine) as session, session.begin():
            conversations = ConversationRepository(session)
            await conversations.lock(thread_id, owner_id=owner_id, timeout_ms=self.lock_timeout_ms)
            if await conversations.status(thread_id) != "idle":
                raise ThreadBusy("the thread has a run or queued input; fork it when idle")
            point = await fork_point(session, states, thread_id, ask)
            head = (await states.get(thread_id)).checkpoint_id
            branches = BranchRepository(session)
            branch = await branches.fork(
                thread_id,
                parent_id=point.branch_id,
                fork_seq=point.seq,
                checkpoint_id=point.checkpoint_id,
                kind=ask.kind,
            )
            branch_id = branch.id
            fork = {
                "checkpoint_id": point.checkpoint_id,
                "branch_id": str(branch_id),
                "tag": branch_id.hex[:8],
                # The head it replaces (still the head until the fork's first checkpoint).
                "head": head,
            }
            repo = IntakeRepository(await session.connection())
            if point.question is not None:
                row = await repo.accept_request_only(
                    thread_id,
                    message_id=point.question.id,
                    message_seq=point.question.seq,
                    lc_id=point.question.lc_id,
                    extra={**ask.extra, "fork": fork},
                )
            else:
                assert ask.content is not None
                lc_id = ask.lc_id
                if lc_id is not None and await repo.lc_id_taken(thread_id, lc_id):
                    lc_id = None  # the replaced branch has it: the edit is a message of its own
                row = await self._accept(
                    repo,
                    thread_id,
                    owner_id,
                    RunAsk(ask.content, lc_id=lc_id, extra={**ask.extra, "fork": fork}),
                )
            await branches.note_request(branch, row.request_id)
        accepted = self._accepted(row)
        return Accepted(accepted.request_id, accepted.message_id, accepted.seq, branch_id)

    async def _accept(
        self,
        repo: IntakeRepository,
        thread_id: uuid.UUID,
        owner_id: str,
        ask: RunAsk,
        *,
        supersede: bool = False,
        extra: Mapping[str, Any] | None = None,
    ) -> AcceptedRow:
        return await repo.accept_user_message(
            thread_id,
            owner_id,
            ask.content,
            lock_timeout_ms=self.lock_timeout_ms,
            lc_id=ask.lc_id,
            extra=ask.extra if extra is None else extra,
            supersede=supersede,
            queueing=self._queueing() if supersede else (),
        )

    def _queueing(self) -> list[str]:
        """The agents whose input queues behind an interrupted run (the others' supersedes)."""
        return self.agents.queueing_agents() if self.agents is not None else []

    async def _superseding(
        self,
        thread_id: uuid.UUID,
        owner_id: str,
        waiting: uuid.UUID,
        accept: Callable[[IntakeRepository, dict[str, Any]], Awaitable[AcceptedRow]],
    ) -> AcceptedRow:
        """New input on a thread whose run ``waiting`` waits for a human answer: in ONE
        transaction, under the thread's row lock, that run ends (``cancelled``, error code
        ``superseded``, through the run state machine) and the input is queued (``accept``).
        The worker that starts the next run answers the run's pending tool calls as cancelled
        by the new message (app/worker/repair.py), so no provider sees a dangling call."""
        async with AsyncSession(self.engine) as session, session.begin():
            await ConversationRepository(session).lock(
                thread_id, owner_id=owner_id, timeout_ms=self.lock_timeout_ms
            )
            superseded = await self._supersede(session, thread_id, waiting)
            extra = {"supersedes": str(superseded)} if superseded is not None else {}
            row = await accept(IntakeRepository(await session.connection()), extra)
        if superseded is None:
            return row
        return AcceptedRow(
            row.request_id,
            row.message_id,
            row.seq,
            row.replayed,
            row.fingerprint,
            superseded=superseded,
        )

    async def _supersede(
        self, session: AsyncSession, thread_id: uuid.UUID, waiting: uuid.UUID | None = None
    ) -> uuid.UUID | None:
        """End the thread's run that waits for a human answer (the caller holds the thread's
        lock, so it cannot be resumed meanwhile); its id, or None when it no longer waits."""
        runs = RunRepository(session)
        if waiting is None:
            latest = await runs.list_for_thread(thread_id, limit=1)
            waiting = latest[0].id if latest else None
        run = await runs.lock(waiting) if waiting is not None else None
        if run is None or run.status != RunStatus.INTERRUPTED:
            return None
        await RunLeaseStatements(session).cancel(run.id, SUPERSEDED)
        return run.id

    async def _agent_for_run(
        self, repo: IntakeRepository, thread_id: uuid.UUID, owner_id: str, named: str | None
    ) -> str:
        """The thread's agent; ``named`` chooses it when none is chosen yet (the choice is
        final: two first runs racing, the second meets the first's choice)."""
        binding = await repo.binding(thread_id, owner_id)
        if binding is None:
            raise NotFound(f"thread {thread_id} not found")
        agent_id, bound = binding
        if named is None or (named == agent_id and bound):
            return agent_id
        if not bound and await repo.bind_agent(
            thread_id, owner_id, named, lock_timeout_ms=self.lock_timeout_ms
        ):
            return named
        current = await repo.binding(thread_id, owner_id)
        if current is not None and current[0] == named:
            return named
        fixed = current[0] if current is not None else agent_id
        raise AgentMismatch(
            f"this thread runs agent {fixed!r}, not {named!r} (a thread's agent is fixed "
            "where it was chosen)"
        )

    def _accepted(self, row: AcceptedRow, superseded: uuid.UUID | None = None) -> Accepted:
        if not row.replayed and self.on_enqueued is not None:
            self.on_enqueued()
        return Accepted(
            request_id=row.request_id,
            message_id=row.message_id,
            seq=row.seq,
            superseded_run_id=superseded or row.superseded,
        )
