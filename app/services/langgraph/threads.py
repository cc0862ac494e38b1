"""LangGraph threads and thread state, on Threadkeeper's threads (same rows, same row lock)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.agents.registry import AgentRegistry
from app.db.models import AgentRun, Conversation, RunStatus
from app.domain.errors import AlreadyExists, NotImplementedHere, ThreadBusy
from app.repositories.agent_state import AgentStateRepository, AgentStateSnapshot
from app.repositories.conversations import ConversationRepository
from app.repositories.messages import MessageRepository
from app.repositories.runs import RunRepository, RunRequestRepository
from app.services.agent_state import AgentStateService
from app.services.langgraph.shapes import (
    LangGraphThreadStatus,
    interrupt_json,
    iso,
    messages_json,
    thread_status,
)
from app.services.threads import ThreadService, check_metadata

#: The most messages a thread's ``values`` carries (a chat UI's whole history).
MAX_HISTORY = 10_000
#: How many threads a status-filtered search scans (status is computed, not a column).
STATUS_SCAN = 1_000


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
        check_metadata(metadata)
        if thread_id is not None:
            async with self.sessions() as session:
                existing = await ConversationRepository(session).get(thread_id)
            if existing is not None:
                if if_exists == "do_nothing" and existing.owner_id == owner_id:
                    return await self.get(thread_id, owner_id)
                raise AlreadyExists(f"thread {thread_id} already exists")
        try:
            async with self.sessions() as session, session.begin():
                conv = await ConversationRepository(session).create(
                    owner_id=owner_id,
                    agent_id=self.agents.default_id,
                    title="",
                    metadata=metadata,
                    thread_id=thread_id,
                )
        except IntegrityError as exc:  # created concurrently under the same id
            raise AlreadyExists(f"thread {thread_id} already exists") from exc
        return await self.get(conv.id, owner_id)

    async def get(self, thread_id: uuid.UUID, owner_id: str) -> dict[str, Any]:
        async with self.sessions() as session:
            conv = await ConversationRepository(session).get_owned(thread_id, owner_id)
            return (await self._threads_json(session, [conv]))[0]

    async def patch(
        self, thread_id: uuid.UUID, owner_id: str, metadata: dict[str, Any]
    ) -> dict[str, Any]:
        """LangGraph's PATCH merges ``metadata`` into the thread's (under the row lock)."""
        async with self.sessions() as session, session.begin():
            repo = ConversationRepository(session)
            conv = await repo.lock(thread_id, owner_id=owner_id, timeout_ms=self.lock_timeout_ms)
            merged = {**conv.meta, **metadata}
            check_metadata(merged)
            await repo.update(thread_id, meta=merged)
        return await self.get(thread_id, owner_id)

    async def delete(self, thread_id: uuid.UUID, owner_id: str) -> None:
        await self.threads.delete(thread_id, owner_id)

    async def search(self, owner_id: str, query: ThreadSearch) -> list[dict[str, Any]]:
        async with self.sessions() as session:
            repo = ConversationRepository(session)
            filtered = query.status is not None
            rows = await repo.search_owned(
                owner_id,
                metadata=query.metadata,
                ids=query.ids,
                limit=STATUS_SCAN if filtered else query.limit,
                offset=0 if filtered else query.offset,
                sort_by=query.sort_by,
                descending=query.sort_order == "desc",
            )
            if not filtered:
                return await self._threads_json(session, rows)
            statuses = await self._statuses(session, rows)
            kept = [c for c in rows if statuses[c.id] == query.status]
            page = kept[query.offset : query.offset + query.limit]
            return await self._threads_json(session, page)

    async def count(self, owner_id: str, query: ThreadSearch) -> int:
        async with self.sessions() as session:
            repo = ConversationRepository(session)
            if query.status is None:
                return await repo.count_owned(owner_id, metadata=query.metadata, ids=query.ids)
            rows = await repo.search_owned(
                owner_id, metadata=query.metadata, ids=query.ids, limit=STATUS_SCAN, offset=0
            )
            statuses = await self._statuses(session, rows)
            return sum(1 for c in rows if statuses[c.id] == query.status)

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
            "metadata": {**conv.meta, "source": "loop", "step": len(history)},
            "created_at": snapshot.created_at or iso(conv.updated_at),
            "interrupts": interrupts,
        }

    async def state_at(
        self, thread_id: uuid.UUID, owner_id: str, checkpoint_id: str
    ) -> dict[str, Any]:
        """Only the head checkpoint is served: older ones are not kept as branches."""
        state = await self.state(thread_id, owner_id)
        if state["checkpoint"]["checkpoint_id"] != checkpoint_id:
            raise NotImplementedHere("only the head checkpoint's state is served (no time travel)")
        return state

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
        rows = await MessageRepository(session).list(thread_id, limit=MAX_HISTORY)
        asked = [m.request_id for m in rows if m.request_id is not None]
        withdrawn = await RunRequestRepository(session).cancelled_among(asked)
        return messages_json(rows, withdrawn)

    @staticmethod
    async def _last_run(session: AsyncSession, thread_id: uuid.UUID) -> AgentRun | None:
        runs = await RunRepository(session).list_for_thread(thread_id, limit=1)
        return runs[0] if runs else None

    async def _statuses(
        self, session: AsyncSession, rows: list[Conversation] | Any
    ) -> dict[uuid.UUID, LangGraphThreadStatus]:
        views = await ConversationRepository(session).statuses([c.id for c in rows])
        out: dict[uuid.UUID, LangGraphThreadStatus] = {}
        for c in rows:
            last = await self._last_run(session, c.id) if views[c.id] == "idle" else None
            out[c.id] = thread_status(views[c.id], last)
        return out

    async def _threads_json(self, session: AsyncSession, rows: Any) -> list[dict[str, Any]]:
        statuses = await self._statuses(session, rows)
        out = []
        for c in rows:
            history = await self._history(session, c.id)
            interrupts: dict[str, Any] = {}
            if statuses[c.id] == "interrupted":
                run = await self._last_run(session, c.id)
                if run is not None and run.interrupt is not None:
                    interrupts = {str(run.id): [interrupt_json(run.interrupt, str(run.id))]}
            out.append(
                {
                    "thread_id": str(c.id),
                    "created_at": iso(c.created_at),
                    "updated_at": iso(c.updated_at),
                    "metadata": c.meta,
                    "status": statuses[c.id],
                    "config": {},
                    "values": {"messages": history},
                    "interrupts": interrupts,
                    "error": None,
                }
            )
        return out
