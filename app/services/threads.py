"""Thread use cases: create, read, list, delete, and the persisted history."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import structlog
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.agents.registry import AgentRegistry
from app.compression.workdir import Workdir
from app.db.models import Conversation, Message
from app.domain.agents import DEFAULT_AGENT_ID
from app.domain.errors import AlreadyExists, NotFound, ThreadBusy, ValidationFailed
from app.domain.states import ThreadStatus
from app.repositories.agent_state import AgentStateRepository
from app.repositories.branches import BranchRepository, lineage_of
from app.repositories.conversations import ConversationRepository
from app.repositories.messages import MessageRepository
from app.repositories.runs import RunRepository, RunRequestRepository

log = structlog.get_logger(__name__)

#: Thread metadata is the client's bookkeeping, not a document store: bounded as compact JSON.
METADATA_MAX_BYTES = 16_384


def check_metadata(metadata: dict[str, Any]) -> None:
    size = len(json.dumps(metadata, separators=(",", ":"), ensure_ascii=False).encode())
    if size > METADATA_MAX_BYTES:
        raise ValidationFailed(
            f"metadata is {size} bytes as JSON; at most {METADATA_MAX_BYTES} are allowed",
            field="metadata",
        )


#: The most messages a chat history carries (a chat UI's whole history).
MAX_HISTORY = 10_000


#: ``chat_history``'s default branch: the thread's current one.
CURRENT: Any = object()


async def chat_history(
    session: AsyncSession, thread_id: uuid.UUID, branch_id: uuid.UUID | None = CURRENT
) -> list[Message]:
    """The chat of one branch (the current one unless told; None: the thread's first) as a chat
    shows it (LangGraph's ``values.messages``): each run's input, then what that run wrote, run
    after run. Input enters when its run starts: input still queued (or withdrawn) is not there
    yet, and a run's answer comes before the input queued while it ran (messages are numbered
    when written, so that input's number is the smaller). A question answered again
    (Regenerate) is answered, on its branch, by that run."""
    repo = BranchRepository(session)
    branches = await repo.list(thread_id)
    if branch_id is CURRENT:
        branch_id = await repo.current(thread_id)
    lineage = lineage_of(branches, branch_id)
    rows = await MessageRepository(session).list(thread_id, limit=MAX_HISTORY, lineage=lineage)
    on_path = {b for b, _ in lineage.steps}
    again = {
        b.fork_seq: b.request_id for b in branches if b.id in on_path and b.kind == "regenerate"
    }

    def asked(m: Message) -> uuid.UUID | None:
        return again.get(m.seq) or m.request_id if m.role == "user" else None

    requests = [r for r in (asked(m) for m in rows) if r is not None]
    runs = await RunRepository(session).for_requests(requests)
    #: Each run's place: the number of the input it answers.
    input_seq = {runs[r].id: m.seq for m in rows if (r := asked(m)) is not None and r in runs}

    def place(m: Message) -> tuple[int, int, int]:
        if m.role == "user":
            return (m.seq, 0, m.seq)
        return (input_seq.get(m.run_id, m.seq) if m.run_id else m.seq, 1, m.seq)

    started = [m for m in rows if m.role != "user" or m.request_id is None or asked(m) in runs]
    return sorted(started, key=place)


@dataclass(frozen=True, slots=True)
class ThreadView:
    """A thread with its computed status (idle / running / interrupted / queued)."""

    conversation: Conversation
    status: ThreadStatus


@dataclass(frozen=True, slots=True)
class HistoryPage:
    messages: Sequence[Message]
    #: Requests cancelled before they ran: their user messages are shown as withdrawn.
    withdrawn_requests: set[uuid.UUID]


class ThreadService:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        lock_timeout_ms: int,
        state: AgentStateRepository | None = None,
        workdir: Workdir | None = None,
        agents: AgentRegistry | None = None,
    ) -> None:
        self.sessions = sessions
        self.lock_timeout_ms = lock_timeout_ms
        self.state = state
        self.workdir = workdir
        #: Which agents a thread may name (None: any; unit tests without a registry).
        self.agents = agents

    async def create(
        self,
        *,
        owner_id: str,
        agent_id: str | None,
        title: str,
        metadata: dict[str, Any] | None = None,
        thread_id: uuid.UUID | None = None,
        if_exists: Literal["raise", "do_nothing"] = "raise",
        agent_chosen: bool = True,
    ) -> ThreadView:
        """``agent_id``: a registered agent (else ``UnknownAgent``), None for the default.
        ``thread_id``: a client-chosen id (taken: ``AlreadyExists``, or with ``do_nothing`` the
        owner's existing thread as it is). ``agent_chosen`` False (a LangGraph thread created
        without an assistant): the thread's first run chooses its agent."""
        check_metadata(metadata or {})
        if self.agents is not None:
            agent_id = self.agents.agent_for_new_thread(agent_id)
        agent_id = agent_id or DEFAULT_AGENT_ID
        if thread_id is not None and if_exists == "do_nothing":
            async with self.sessions() as session:
                existing = await ConversationRepository(session).get(thread_id)
            if existing is not None and existing.owner_id == owner_id:
                return await self.view(thread_id, owner_id)
        try:
            async with self.sessions() as session, session.begin():
                conv = await ConversationRepository(session).create(
                    owner_id=owner_id,
                    agent_id=agent_id,
                    title=title,
                    metadata=metadata,
                    thread_id=thread_id,
                    agent_bound=agent_chosen,
                )
                return ThreadView(conv, "idle")
        except IntegrityError as exc:  # the client-chosen id is taken
            if if_exists == "do_nothing":
                view = await self._view_if_owned(thread_id, owner_id)
                if view is not None:
                    return view
            raise AlreadyExists(f"thread {thread_id} already exists") from exc

    async def _view_if_owned(self, thread_id: uuid.UUID | None, owner_id: str) -> ThreadView | None:
        if thread_id is None:
            return None
        try:
            return await self.view(thread_id, owner_id)
        except NotFound:
            return None

    async def view(self, thread_id: uuid.UUID, owner_id: str) -> ThreadView:
        async with self.sessions() as session:
            repo = ConversationRepository(session)
            conv = await repo.get_owned(thread_id, owner_id)
            return ThreadView(conv, (await repo.statuses([conv.id]))[conv.id])

    async def list(
        self,
        owner_id: str,
        *,
        limit: int,
        before: tuple[datetime, uuid.UUID] | None,
        metadata: dict[str, Any] | None = None,
    ) -> list[ThreadView]:
        """``metadata``: only threads whose metadata contains this object (JSONB ``@>``)."""
        async with self.sessions() as session:
            repo = ConversationRepository(session)
            rows = await repo.list_owned(owner_id, limit=limit, before=before, metadata=metadata)
            statuses = await repo.statuses([c.id for c in rows])
            return [ThreadView(c, statuses[c.id]) for c in rows]

    async def update(
        self,
        thread_id: uuid.UUID,
        owner_id: str,
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        merge: bool = False,
    ) -> ThreadView:
        """Title and/or metadata (replaced whole, or with ``merge`` merged into the thread's:
        LangGraph's PATCH); under the thread lock like every write."""
        values: dict[str, Any] = {}
        if title is not None:
            values["title"] = title
        async with self.sessions() as session, session.begin():
            repo = ConversationRepository(session)
            conv = await repo.lock(thread_id, owner_id=owner_id, timeout_ms=self.lock_timeout_ms)
            if metadata is not None:
                values["meta"] = {**conv.meta, **metadata} if merge else metadata
                check_metadata(values["meta"])
            if values:
                conv = await repo.update(thread_id, **values)
            return ThreadView(conv, (await repo.statuses([conv.id]))[conv.id])

    async def require_idle(self, thread_id: uuid.UUID, owner_id: str) -> None:
        """``ThreadBusy`` unless the thread is idle, checked under the row lock (what intake and
        the worker's claim take), so nothing was in flight when it was checked."""
        async with self.sessions() as session, session.begin():
            repo = ConversationRepository(session)
            await repo.lock(thread_id, owner_id=owner_id, timeout_ms=self.lock_timeout_ms)
            if await repo.status(thread_id) != "idle":
                raise ThreadBusy("the thread has a run or queued input; try again when idle")

    async def delete(self, thread_id: uuid.UUID, owner_id: str) -> None:
        """Refused while a run is running: deleting under a working agent would lose its output.
        A run waiting for approval goes with its thread (nobody works on it), as on LangGraph."""
        async with self.sessions() as session, session.begin():
            repo = ConversationRepository(session)
            await repo.lock(thread_id, owner_id=owner_id, timeout_ms=self.lock_timeout_ms)
            if await repo.status(thread_id) == "running":
                raise ThreadBusy("the thread has a running run; cancel it first")
            await repo.delete(thread_id)
        # The rows are gone (the thread is 404 from here on); now its model state and files.
        try:
            if self.state is not None:
                await self.state.delete_thread(thread_id)
            if self.workdir is not None:
                await self.workdir.delete_thread(str(thread_id))
        except Exception as exc:
            log.warning("thread_cleanup_failed", thread_id=str(thread_id), error=repr(exc))

    async def messages(
        self,
        thread_id: uuid.UUID,
        owner_id: str,
        *,
        after_seq: int,
        limit: int,
        branch_id: uuid.UUID | None = None,
    ) -> HistoryPage:
        """One page of a branch's chat: the current branch's unless ``branch_id`` names one
        (the thread's id names its first branch); nothing is ever rewritten, so a branch a
        fork replaced stays readable."""
        async with self.sessions() as session:
            conv = await ConversationRepository(session).get_owned(thread_id, owner_id)
            branches = await BranchRepository(session).list(thread_id)
            if branch_id is None:
                branch_id = conv.branch_id
            elif branch_id == thread_id:
                branch_id = None
            elif branch_id not in {b.id for b in branches}:
                raise NotFound(f"thread {thread_id} has no branch {branch_id}")
            rows = await MessageRepository(session).list(
                thread_id,
                after_seq=after_seq,
                limit=limit,
                lineage=lineage_of(branches, branch_id),
            )
            asked = [m.request_id for m in rows if m.request_id is not None]
            withdrawn = await RunRequestRepository(session).cancelled_among(asked)
            return HistoryPage(rows, withdrawn)
