"""A LangGraph run's progress as the API streams it: the run waits (FIFO) for a worker, then
its history so far (``RunStart``), then each event of its log (``run_events``, the same log /v1
streams) with the message a ``message`` event names (``RunStep``). ``app/api/langgraph/parts``
turns them into LangGraph stream parts."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.agents.registry import AgentRegistry
from app.db.models import Message, RequestStatus, RunEvent, RunStatus
from app.repositories.messages import MessageRepository
from app.repositories.run_events import RunEventRepository
from app.services.langgraph.runs import LangGraphRun
from app.services.run_feed import RunFeed
from app.services.threads import chat_history

#: Seconds each wait for a run's status change lasts before it looks again (a safety net: the
#: status event's NOTIFY ends the wait at once).
WAIT_SLICE = 30.0


@dataclass(frozen=True, slots=True)
class RunStart:
    """The run started: the history as its first part shows it."""

    history: list[Message]
    #: A graph of the user's own: its state keys besides ``messages`` as its ``state`` events
    #: tell them (those of the latest at or before the stream's resume point; empty when the
    #: stream starts with the run). None: the agent keeps no state of its own (its ``values``
    #: follow its messages).
    state: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RunStep:
    event: RunEvent
    #: The message a ``message`` event names (None for other events).
    message: Message | None


class LangGraphStreams:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        feed: RunFeed,
        agents: AgentRegistry,
    ) -> None:
        self.sessions = sessions
        self.feed = feed
        self.agents = agents

    async def follow(
        self,
        run: LangGraphRun,
        owner_id: str,
        after_event: int,
        *,
        keepalive: float,
        stop: asyncio.Event,
    ) -> AsyncIterator[RunStart | RunStep | None]:
        """The run's start and its events after ``after_event`` (None: a keep-alive); ends
        with the run, when its pending request is withdrawn, or when ``stop`` is set. A resume
        (no request) starts from its latest ``resumed`` event."""
        agent_run = run.run
        while agent_run is None:  # pending: wait (FIFO) for a worker to take it (NOTIFY)
            assert run.request is not None
            view = await self.feed.wait_request(run.request.id, owner_id, keepalive, stop=stop)
            if view.request.status == RequestStatus.CANCELLED or stop.is_set():
                return
            agent_run = view.run
            if agent_run is None:
                yield None
        start = after_event
        if run.request is None and start == 0:
            start = await self._resumed_at(agent_run.id)
        yield RunStart(
            await self._history_until(run), await self._state_at(run, agent_run.id, start)
        )
        feed = self.feed.follow(agent_run.id, owner_id, start, keepalive=keepalive, stop=stop)
        async for events in feed:
            if not events:
                yield None
            for event in events:
                yield RunStep(event, await self._message_of(event))

    async def until_stopped(self, run: LangGraphRun, owner_id: str, *, stop: asyncio.Event) -> None:
        """Returns once the run is no longer running (a cancelled one: when its worker has
        stopped it), woken by the run's status events (NOTIFY), not by polling."""
        agent_run = run.run
        while agent_run is not None and agent_run.status == RunStatus.RUNNING:
            if stop.is_set():
                return
            agent_run = await self.feed.wait(agent_run.id, owner_id, WAIT_SLICE, stop=stop)

    async def _state_at(
        self, run: LangGraphRun, agent_run_id: uuid.UUID, start: int
    ) -> dict[str, Any] | None:
        if not self.agents.is_graph(run.assistant_id):
            return None
        if start == 0:
            return {}
        async with self.sessions() as session:
            return await RunEventRepository(session).last_state(agent_run_id, start) or {}

    async def _message_of(self, event: RunEvent) -> Message | None:
        if event.type != "message":
            return None
        async with self.sessions() as session:
            return await MessageRepository(session).get(uuid.UUID(str(event.data["message_id"])))

    async def _history_until(self, run: LangGraphRun) -> list[Message]:
        """The history as the run's first part shows it: up to the run's own input (queued
        input is not there yet; a finished run joined late does not show what came after)."""
        async with self.sessions() as session:
            rows = await chat_history(session, run.thread_id)
        asked = run.request.id if run.request is not None else None
        own = next((i for i, m in enumerate(rows) if asked and m.request_id == asked), None)
        return rows if own is None else rows[: own + 1]

    async def _resumed_at(self, agent_run_id: uuid.UUID) -> int:
        async with self.sessions() as session:
            return await RunEventRepository(session).last_status_event(agent_run_id, "resumed")
