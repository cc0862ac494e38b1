"""LangGraph threads and thread state: adapters over ThreadService and the agent state (same
rows, same row lock); they return records the API presents (``app/api/langgraph``)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.agents.registry import AgentRegistry
from app.db.models import AgentRun, Conversation, Message, RunStatus
from app.domain.errors import (
    AgentMismatch,
    CheckpointNotFound,
    NotImplementedHere,
    ValidationFailed,
)
from app.repositories.agent_state import AgentStateRepository, AgentStateSnapshot
from app.repositories.branches import BranchRepository
from app.repositories.conversations import ConversationRepository, StatusFilter
from app.repositories.messages import MessageRepository
from app.repositories.runs import RunRepository
from app.services.agent_state import AgentStateService, StateView
from app.services.langgraph.history import chat_at
from app.services.langgraph.statuses import LangGraphThreadStatus, thread_status
from app.services.threads import ThreadService, chat_history

#: Thread metadata keys that are the thread's agent (LangGraph clients read and filter on
#: them), derived from ``conversations.agent_id``: never stored as the client's metadata.
AGENT_KEYS = ("graph_id", "assistant_id")
#: A LangGraph thread status as a filter on Threadkeeper's (one busy answer).
STATUS_FILTERS: dict[LangGraphThreadStatus, StatusFilter] = {
    "busy": StatusFilter(("running", "queued")),
    "interrupted": StatusFilter(("interrupted",)),
    "idle": StatusFilter(("idle",), last_run_failed=False),
    "error": StatusFilter(("idle",), last_run_failed=True),
}


def split_agent_keys(metadata: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The client's own metadata, and the agent ``graph_id`` / ``assistant_id`` name (they
    must agree when both are sent)."""
    own = {k: v for k, v in metadata.items() if k not in AGENT_KEYS}
    named = {str(metadata[k]) for k in AGENT_KEYS if k in metadata}
    if len(named) > 1:
        raise ValidationFailed("graph_id and assistant_id name different agents", field="metadata")
    return own, next(iter(named), None)


def thread_metadata(conv: Conversation) -> dict[str, Any]:
    """The client's metadata plus ``graph_id`` / ``assistant_id``: the thread's agent, once
    chosen (what Agent Chat UI lists threads by)."""
    if not conv.agent_bound:
        return dict(conv.meta)
    return {**conv.meta, "graph_id": conv.agent_id, "assistant_id": conv.agent_id}


async def langgraph_statuses(
    session: AsyncSession, ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, LangGraphThreadStatus]:
    """idle | busy (running or queued input) | interrupted | error (the last run failed)."""
    repo = ConversationRepository(session)
    views = await repo.statuses(ids)
    failed = await repo.last_runs_failed([t for t, s in views.items() if s == "idle"])
    return {t: thread_status(s, t in failed) for t, s in views.items()}


async def chats_at(
    session: AsyncSession, thread_id: uuid.UUID, snapshots: Sequence[AgentStateSnapshot]
) -> list[list[Message]]:
    """Per checkpoint, the chat as it stood there: the chat of the branch its last message
    (found in PostgreSQL) was written on, up to that message."""
    ids = {str(m.id) for s in snapshots for m in s.messages if m.id}
    found = await MessageRepository(session).by_lc_ids(thread_id, sorted(ids))
    chats: dict[uuid.UUID | None, list[Message]] = {}
    out: list[list[Message]] = []
    for snapshot in snapshots:
        last = next(
            (found[str(m.id)] for m in reversed(snapshot.messages) if str(m.id) in found), None
        )
        if last is None:
            out.append([])
            continue
        if last.branch_id not in chats:
            chats[last.branch_id] = await chat_history(session, thread_id, last.branch_id)
        out.append(chat_at(chats[last.branch_id], snapshot))
    return out


@dataclass(frozen=True, slots=True)
class ThreadSearch:
    metadata: dict[str, Any] | None = None
    ids: list[uuid.UUID] | None = None
    status: LangGraphThreadStatus | None = None
    limit: int = 10
    offset: int = 0
    sort_by: str = "created_at"
    sort_order: Literal["asc", "desc"] = "desc"


@dataclass(frozen=True, slots=True)
class ThreadRecord:
    conversation: Conversation
    status: LangGraphThreadStatus
    #: The full history (one thread), or the first message (a search page).
    messages: list[Message]
    #: The run waiting for approval (status ``interrupted``).
    interrupted: AgentRun | None

    @property
    def metadata(self) -> dict[str, Any]:
        return thread_metadata(self.conversation)


@dataclass(frozen=True, slots=True)
class PastState:
    """An earlier checkpoint's state: its values with the chat as it stood there."""

    conversation: Conversation
    snapshot: AgentStateSnapshot
    chat: list[Message]

    @property
    def metadata(self) -> dict[str, Any]:
        return thread_metadata(self.conversation)


@dataclass(frozen=True, slots=True)
class StateRecord:
    conversation: Conversation
    history: list[Message]
    snapshot: AgentStateSnapshot
    view: StateView
    interrupted: AgentRun | None

    @property
    def metadata(self) -> dict[str, Any]:
        return thread_metadata(self.conversation)


class LangGraphThreadService:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        agents: AgentRegistry,
        threads: ThreadService,
        agent_state: AgentStateService,
    ) -> None:
        self.sessions = sessions
        self.agents = agents
        self.threads = threads
        self.agent_state = agent_state

    async def create(
        self,
        owner_id: str,
        *,
        thread_id: uuid.UUID | None,
        metadata: dict[str, Any],
        if_exists: Literal["raise", "do_nothing"] = "raise",
    ) -> ThreadRecord:
        """``metadata.graph_id`` (what ``threads.create(graph_id=...)`` sends) or
        ``assistant_id`` chooses the thread's agent; without either its first run does."""
        own, named = split_agent_keys(metadata)
        view = await self.threads.create(
            owner_id=owner_id,
            agent_id=named,
            title="",
            metadata=own,
            thread_id=thread_id,
            if_exists=if_exists,
            agent_chosen=named is not None,
        )
        return await self.get(view.conversation.id, owner_id)

    async def get(self, thread_id: uuid.UUID, owner_id: str) -> ThreadRecord:
        async with self.sessions() as session:
            conv = await ConversationRepository(session).get_owned(thread_id, owner_id)
            return (await self._records(session, [conv], full=True))[0]

    async def patch(
        self, thread_id: uuid.UUID, owner_id: str, metadata: dict[str, Any]
    ) -> ThreadRecord:
        """LangGraph's PATCH merges ``metadata`` into the thread's (ThreadService's merge).
        ``graph_id`` / ``assistant_id`` are the thread's agent, not metadata: naming another
        agent is ``agent_mismatch``."""
        own, named = split_agent_keys(metadata)
        if named is not None:
            view = await self.threads.view(thread_id, owner_id)
            if view.conversation.agent_bound and named != view.conversation.agent_id:
                raise AgentMismatch(
                    f"this thread runs agent {view.conversation.agent_id!r}, not {named!r}"
                )
        await self.threads.update(thread_id, owner_id, metadata=own, merge=True)
        return await self.get(thread_id, owner_id)

    async def delete(self, thread_id: uuid.UUID, owner_id: str) -> None:
        await self.threads.delete(thread_id, owner_id)

    async def search(self, owner_id: str, query: ThreadSearch) -> list[ThreadRecord]:
        """One page in a few queries: no thread's full history is read (``values`` holds each
        thread's first message, what a thread list shows)."""
        own, named = split_agent_keys(query.metadata or {})
        async with self.sessions() as session:
            rows = await ConversationRepository(session).search_owned(
                owner_id,
                metadata=own or None,
                ids=query.ids,
                agent_id=named,
                status=STATUS_FILTERS[query.status] if query.status else None,
                limit=query.limit,
                offset=query.offset,
                sort_by=query.sort_by,
                descending=query.sort_order == "desc",
            )
            return await self._records(session, rows, full=False)

    async def count(self, owner_id: str, query: ThreadSearch) -> int:
        own, named = split_agent_keys(query.metadata or {})
        async with self.sessions() as session:
            return await ConversationRepository(session).count_owned(
                owner_id,
                metadata=own or None,
                ids=query.ids,
                agent_id=named,
                status=STATUS_FILTERS[query.status] if query.status else None,
            )

    async def state(self, thread_id: uuid.UUID, owner_id: str) -> StateRecord:
        async with self.sessions() as session:
            conv = await ConversationRepository(session).get_owned(thread_id, owner_id)
            history = await chat_history(session, thread_id)
            latest = await RunRepository(session).list_for_thread(thread_id, limit=1)
        snapshot = await self.agents.state_of(conv.agent_id).get(thread_id)
        view = await self.agent_state.view(thread_id, owner_id)
        run = latest[0] if latest else None
        waiting = run if run is not None and run.status == RunStatus.INTERRUPTED else None
        return StateRecord(conv, history, snapshot, view, waiting)

    async def state_at(
        self, thread_id: uuid.UUID, owner_id: str, checkpoint_id: str
    ) -> StateRecord | PastState:
        """The state at one of the thread's checkpoints (the head's is ``state``); 404
        ``checkpoint_not_found`` for one the thread does not have."""
        async with self.sessions() as session:
            conv = await ConversationRepository(session).get_owned(thread_id, owner_id)
        states = self.agents.state_of(conv.agent_id)
        snapshot = await states.at(thread_id, checkpoint_id)
        if snapshot is None:
            raise CheckpointNotFound(f"thread {thread_id} has no checkpoint {checkpoint_id!r}")
        head = await states.get(thread_id)
        if head.checkpoint_id == checkpoint_id:
            return await self.state(thread_id, owner_id)
        async with self.sessions() as session:
            (chat,) = await chats_at(session, thread_id, [snapshot])
        return PastState(conv, snapshot, chat)

    async def history(
        self, thread_id: uuid.UUID, owner_id: str, *, limit: int, before: str | None = None
    ) -> list[StateRecord | PastState]:
        """The thread's checkpoints newest first (every branch, as LangGraph lists them), each
        with the chat as it stood there; the head is the thread's state."""
        async with self.sessions() as session:
            conv = await ConversationRepository(session).get_owned(thread_id, owner_id)
        snapshots = await self.agents.state_of(conv.agent_id).history(
            thread_id, limit=limit, before=before
        )
        head = await self.state(thread_id, owner_id) if before is None and snapshots else None
        async with self.sessions() as session:
            chats = await chats_at(session, thread_id, snapshots)
        out: list[StateRecord | PastState] = []
        for snapshot, chat in zip(snapshots, chats, strict=True):
            if head is not None and snapshot.checkpoint_id == head.snapshot.checkpoint_id:
                out.append(head)
            else:
                out.append(PastState(conv, snapshot, chat))
        return out

    async def head_checkpoint_id(self, thread_id: uuid.UUID) -> str | None:
        return (await AgentStateRepository(self.agents.state_graph).get(thread_id)).checkpoint_id

    async def refuse_update_state(self, thread_id: uuid.UUID, owner_id: str) -> None:
        """update_state: 409 ``thread_busy`` while the thread is busy (checked under the row lock,
        like manual compression); when idle ``not_implemented``: writing the model view from a
        client would bypass the full history and the budget."""
        await self.threads.require_idle(thread_id, owner_id)
        raise NotImplementedHere(
            "update_state is not supported: the model view is Threadkeeper's (compress it with "
            "POST /threads/{thread_id}/context/compress); post input as a run"
        )

    async def _records(
        self, session: AsyncSession, rows: Sequence[Conversation], *, full: bool
    ) -> list[ThreadRecord]:
        """``full``: the whole history (one thread); else each thread's first message (one
        query for the page: no history is read)."""
        ids = [c.id for c in rows]
        statuses = await langgraph_statuses(session, ids)
        latest = await RunRepository(session).latest_for_threads(ids)
        if full:
            shown = {c.id: await chat_history(session, c.id) for c in rows}
        else:
            opening = await MessageRepository(session).first_of_threads(ids)
            shown = {t: [m] for t, m in opening.items()}
            for c in rows:  # a forked thread opens with its current branch's first message
                if c.branch_id is not None:
                    lineage = await BranchRepository(session).lineage(c.id, c.branch_id)
                    shown[c.id] = list(
                        await MessageRepository(session).list(c.id, limit=1, lineage=lineage)
                    )
        return [
            ThreadRecord(
                c,
                statuses[c.id],
                shown.get(c.id, []),
                latest.get(c.id) if statuses[c.id] == "interrupted" else None,
            )
            for c in rows
        ]
