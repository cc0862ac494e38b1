"""LangGraph threads and thread state, on Threadkeeper's threads (same rows, same row lock)."""

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
    ThreadBusy,
    UnknownAgent,
    ValidationFailed,
)
from app.repositories.agent_state import AgentStateRepository, AgentStateSnapshot
from app.repositories.branches import BranchRepository, lineage_of
from app.repositories.conversations import ConversationRepository, StatusFilter
from app.repositories.messages import MessageRepository
from app.repositories.runs import RunRepository
from app.services.agent_state import AgentStateService
from app.services.langgraph.history import chat_at, past_state_json
from app.services.langgraph.shapes import (
    LangGraphThreadStatus,
    interrupt_json,
    iso,
    message_json,
    thread_status,
)
from app.services.threads import ThreadService

#: The most messages a thread's ``values`` carries (a chat UI's whole history).
MAX_HISTORY = 10_000

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


#: ``chat_history``'s default branch: the thread's current one.
CURRENT: Any = object()


async def chat_history(
    session: AsyncSession, thread_id: uuid.UUID, branch_id: uuid.UUID | None = CURRENT
) -> list[Message]:
    """The chat of one branch (the current one unless told; None: the thread's first) as
    LangGraph shows it: a run's input enters when its run starts (input still queued, or
    withdrawn, is not there yet), right before that run's first message."""
    repo = BranchRepository(session)
    branches = await repo.list(thread_id)
    if branch_id is CURRENT:
        branch_id = await repo.current(thread_id)
    lineage = lineage_of(branches, branch_id)
    rows = await MessageRepository(session).list(thread_id, limit=MAX_HISTORY, lineage=lineage)
    on_path = {b for b, _ in lineage.steps}
    # A question answered again (Regenerate) is answered, on this branch, by that run.
    again = {
        b.fork_seq: b.request_id for b in branches if b.id in on_path and b.kind == "regenerate"
    }
    asked = [m.request_id for m in rows if m.role == "user" and m.request_id is not None]
    requests = [*asked, *(r for r in again.values() if r is not None)]
    run_of = {r: run.id for r, run in (await RunRepository(session).for_requests(requests)).items()}
    first_seq: dict[uuid.UUID, int] = {}
    for m in rows:
        if m.run_id is not None:
            first_seq.setdefault(m.run_id, m.seq)
    end = (rows[-1].seq + 1) if rows else 0

    def answering(m: Message) -> uuid.UUID | None:
        request = again.get(m.seq, m.request_id) if m.seq in again else m.request_id
        return run_of.get(request) if request is not None else None

    def place(m: Message) -> tuple[int, int, int]:
        if m.role != "user" or m.request_id is None:
            return (m.seq, 1, m.seq)
        run = answering(m)
        return (first_seq.get(run, end) if run is not None else end, 0, m.seq)

    started = [
        m for m in rows if m.role != "user" or m.request_id is None or answering(m) is not None
    ]
    return sorted(started, key=place)


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


class LangGraphThreadService:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        lock_timeout_ms: int,
        agents: AgentRegistry,
        threads: ThreadService,
        agent_state: AgentStateService,
    ) -> None:
        self.sessions = sessions
        self.lock_timeout_ms = lock_timeout_ms
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
    ) -> dict[str, Any]:
        """``metadata.graph_id`` (what ``threads.create(graph_id=...)`` sends) or
        ``assistant_id`` chooses the thread's agent; without either its first run does."""
        own, named = split_agent_keys(metadata)
        if named is not None and self.agents.info(named) is None:
            raise UnknownAgent(f"assistant {named!r} is not a registered agent")
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

    async def get(self, thread_id: uuid.UUID, owner_id: str) -> dict[str, Any]:
        async with self.sessions() as session:
            conv = await ConversationRepository(session).get_owned(thread_id, owner_id)
            return (await self._threads_json(session, [conv], full=True))[0]

    async def patch(
        self, thread_id: uuid.UUID, owner_id: str, metadata: dict[str, Any]
    ) -> dict[str, Any]:
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

    async def search(self, owner_id: str, query: ThreadSearch) -> list[dict[str, Any]]:
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
            return await self._threads_json(session, rows, full=False)

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

    async def state(self, thread_id: uuid.UUID, owner_id: str) -> dict[str, Any]:
        """The head state: ``values.messages`` is the FULL history (what a chat UI shows); the
        model's compressed view and the context pressure are under ``values.threadkeeper``."""
        async with self.sessions() as session:
            conv = await ConversationRepository(session).get_owned(thread_id, owner_id)
            history = await self._history(session, thread_id)
            active = await self._last_run(session, thread_id)
        snapshot = await self.agents.state_of(conv.agent_id).get(thread_id)
        view = await self.agent_state.view(thread_id, owner_id)
        interrupts = self._interrupts(active, snapshot)
        values: dict[str, Any] = {
            **view.values,  # a graph of the user's own: its other state keys, as it keeps them
            "messages": history,
            "threadkeeper": {
                "model_view": view.messages,
                "input_tokens": view.input_tokens,
                "summary_threshold": view.summary_threshold,
                "pressure": view.pressure,
                "pressure_reason": view.pressure_reason,
                "compression_suggested": view.compression_suggested,
                "summary_present": view.summary_present,
                "summarized_messages": view.summarized_messages,
                "manual_compression": {
                    "available": view.manual_available,
                    "reason": view.manual_reason,
                },
            },
        }
        checkpoint = self._checkpoint(thread_id, snapshot.checkpoint_id)
        tasks = [
            {
                "id": i["id"],
                "name": snapshot.next[0] if snapshot.next else "model",
                "path": [],
                "error": None,
                "interrupts": [i],
                "checkpoint": None,
                "state": None,
                "result": None,
            }
            for i in interrupts
        ]
        return {
            "values": values,
            "next": list(snapshot.next) if interrupts else [],
            "tasks": tasks,
            "checkpoint": checkpoint,
            "parent_checkpoint": (
                self._checkpoint(thread_id, snapshot.parent_checkpoint_id)
                if snapshot.parent_checkpoint_id
                else None
            ),
            "metadata": {**thread_metadata(conv), "source": "loop", "step": len(history)},
            "created_at": snapshot.created_at or iso(conv.updated_at),
            "interrupts": interrupts,
        }

    async def state_at(
        self, thread_id: uuid.UUID, owner_id: str, checkpoint_id: str
    ) -> dict[str, Any]:
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
        return past_state_json(str(thread_id), snapshot, chat, thread_metadata(conv))

    async def history(
        self, thread_id: uuid.UUID, owner_id: str, *, limit: int, before: str | None = None
    ) -> list[dict[str, Any]]:
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
        out = []
        for snapshot, chat in zip(snapshots, chats, strict=True):
            if head is not None and snapshot.checkpoint_id == head["checkpoint"]["checkpoint_id"]:
                out.append(head)
                continue
            out.append(past_state_json(str(thread_id), snapshot, chat, thread_metadata(conv)))
        return out

    async def head_checkpoint_id(self, thread_id: uuid.UUID) -> str | None:
        return (await AgentStateRepository(self.agents.state_graph).get(thread_id)).checkpoint_id

    async def refuse_update_state(self, thread_id: uuid.UUID, owner_id: str) -> None:
        """update_state: 409 ``thread_busy`` while the thread is busy (checked under the row lock,
        like manual compression); when idle ``not_implemented``: writing the model view from a
        client would bypass the full history and the budget."""
        async with self.sessions() as session, session.begin():
            repo = ConversationRepository(session)
            await repo.lock(thread_id, owner_id=owner_id, timeout_ms=self.lock_timeout_ms)
            if await repo.status(thread_id) != "idle":
                raise ThreadBusy("the thread has a run or queued input; try again when idle")
        raise NotImplementedHere(
            "update_state is not supported: the model view is Threadkeeper's (compress it with "
            "POST /threads/{thread_id}/context/compress); post input as a run"
        )

    @staticmethod
    def _checkpoint(thread_id: uuid.UUID, checkpoint_id: str | None) -> dict[str, Any]:
        return {
            "thread_id": str(thread_id),
            "checkpoint_ns": "",
            "checkpoint_id": checkpoint_id,
            "checkpoint_map": None,
        }

    @staticmethod
    def _interrupts(run: AgentRun | None, snapshot: AgentStateSnapshot) -> list[dict[str, Any]]:
        if run is None or run.status != RunStatus.INTERRUPTED or run.interrupt is None:
            return []
        # The interrupt's id is the run's: the stream's ``__interrupt__`` names it the same way.
        return [interrupt_json(run.interrupt, str(run.id))]

    async def _history(self, session: AsyncSession, thread_id: uuid.UUID) -> list[dict[str, Any]]:
        return [message_json(m) for m in await chat_history(session, thread_id)]

    @staticmethod
    async def _last_run(session: AsyncSession, thread_id: uuid.UUID) -> AgentRun | None:
        runs = await RunRepository(session).list_for_thread(thread_id, limit=1)
        return runs[0] if runs else None

    async def _threads_json(
        self, session: AsyncSession, rows: Sequence[Conversation], *, full: bool
    ) -> list[dict[str, Any]]:
        """``full``: ``values.messages`` is the whole history (one thread); else only the
        first message of each (one query for the page)."""
        ids = [c.id for c in rows]
        statuses = await langgraph_statuses(session, ids)
        latest = await RunRepository(session).latest_for_threads(ids)
        if full:
            firsts = {c.id: await chat_history(session, c.id) for c in rows}
        else:
            opening = await MessageRepository(session).first_of_threads(ids)
            firsts = {t: [m] for t, m in opening.items()}
            for c in rows:  # a forked thread opens with its current branch's first message
                if c.branch_id is not None:
                    lineage = await BranchRepository(session).lineage(c.id, c.branch_id)
                    firsts[c.id] = list(
                        await MessageRepository(session).list(c.id, limit=1, lineage=lineage)
                    )
        out = []
        for c in rows:
            run = latest.get(c.id)
            interrupts: dict[str, Any] = {}
            if statuses[c.id] == "interrupted" and run is not None and run.interrupt is not None:
                interrupts = {str(run.id): [interrupt_json(run.interrupt, str(run.id))]}
            out.append(
                {
                    "thread_id": str(c.id),
                    "created_at": iso(c.created_at),
                    "updated_at": iso(c.updated_at),
                    "metadata": thread_metadata(c),
                    "status": statuses[c.id],
                    "config": {},
                    "values": {"messages": [message_json(m) for m in firsts.get(c.id, [])]},
                    "interrupts": interrupts,
                    "error": None,
                }
            )
        return out
