"""A run's events (``run_events``, the same log /v1 streams) as LangGraph stream parts.

``metadata`` first; token deltas -> ``messages`` tuples ``[AIMessageChunk, {langgraph_node}]``;
persisted messages -> ``updates`` / ``values`` (the full history so far); compression ->
``custom`` ``threadkeeper.compression``; an approval interrupt -> ``__interrupt__`` in
``values``/``updates``; a failure -> ``error {error, message}``. Then the stream ends (no
``end`` event). Part ids are ``<event id>-<n>`` (the n-th part made from that event; the
state the run starts from is ``0-0``), so a
``Last-Event-ID`` resumes exactly after the part the client saw.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.models import Message, RequestStatus, RunEvent
from app.domain.errors import ValidationFailed
from app.repositories.messages import MessageRepository
from app.repositories.run_events import RunEventRepository
from app.services.langgraph.runs import LangGraphRun
from app.services.langgraph.shapes import (
    MODEL_NODE,
    chunk_json,
    interrupt_json,
    message_json,
    node_of,
)
from app.services.langgraph.threads import chat_history
from app.services.run_feed import RunFeed

#: Stream modes with parts of their own; the others (events, debug, tasks, checkpoints) are
#: accepted and silent. ``messages`` (the legacy mode) is served like ``messages-tuple``.
SERVED_MODES = frozenset({"values", "updates", "messages-tuple", "messages", "custom"})
_PART_ID = re.compile(r"([0-9]{1,16})(?:-([0-9]{1,6}))?")


@dataclass(frozen=True, slots=True)
class Part:
    event: str
    data: Any
    id: str | None = None


@dataclass(frozen=True, slots=True)
class Cursor:
    """Resume point: after part ``index`` of event ``event_id`` (index -1: the whole event)."""

    event_id: int = 0
    index: int = -1


def parse_last_event_id(value: str | None) -> Cursor:
    if not value:
        return Cursor()
    match = _PART_ID.fullmatch(value)
    if match is None:
        raise ValidationFailed(
            "Last-Event-ID must be an id this server sent", field="Last-Event-ID"
        )
    event_id, index = int(match.group(1)), match.group(2)
    return Cursor(event_id, int(index) if index is not None else -1)


@dataclass
class _Translation:
    """Per-stream state: the history shown in ``values`` and the AI messages already streamed."""

    run: LangGraphRun
    modes: frozenset[str]
    history: list[Message] = field(default_factory=list)
    streamed: set[str] = field(default_factory=set)
    agent_run_id: uuid.UUID | None = None

    def values(self, extra: dict[str, Any] | None = None) -> Part:
        return Part(
            "values", {"messages": [message_json(m) for m in self.history], **(extra or {})}
        )

    def meta(self, node: str) -> dict[str, Any]:
        return {
            "langgraph_node": node,
            "run_id": str(self.run.run_id),
            "thread_id": str(self.run.thread_id),
            "assistant_id": self.run.assistant_id,
        }

    def parts(self, event: RunEvent, new: Sequence[Message]) -> tuple[list[Part], bool]:
        """The parts one event makes, and whether the stream ends after them."""
        data, out = event.data, []
        if event.type == "delta":
            self.streamed.add(str(data.get("lc_id")))
            if self.modes & {"messages-tuple", "messages"}:
                chunk = chunk_json(data.get("lc_id"), str(data.get("text", "")))
                out.append(Part("messages", [chunk, self.meta(data.get("node") or MODEL_NODE)]))
        elif event.type == "message":
            for m in new:
                node, as_json = node_of(m.role), message_json(m)
                if "updates" in self.modes:
                    out.append(Part("updates", {node: {"messages": [as_json]}}))
                if self.modes & {"messages-tuple", "messages"} and (m.lc_id not in self.streamed):
                    out.append(Part("messages", [as_json, self.meta(node)]))
            if new and "values" in self.modes:
                out.append(self.values())
        elif event.type in ("compression", "provider_retry"):
            if "custom" in self.modes:
                out.append(Part("custom", {**data, "type": f"threadkeeper.{event.type}"}))
        elif event.type == "custom":  # a node's get_stream_writer() output, as it wrote it
            if "custom" in self.modes:
                out.append(Part("custom", data.get("data")))
        elif event.type == "status":
            return self._status(event, data)
        return out, False

    def _status(self, event: RunEvent, data: dict[str, Any]) -> tuple[list[Part], bool]:
        status, out = data.get("status"), []
        if status == "interrupted":
            value = data.get("interrupt") or data.get("interrupt_value")
            interrupt = [interrupt_json(value, str(event.run_id))]
            if "updates" in self.modes:
                out.append(Part("updates", {"__interrupt__": interrupt}))
            if "values" in self.modes:
                out.append(self.values({"__interrupt__": interrupt}))
            return out, True
        if status == "failed":
            error = {
                "error": data.get("error_code") or "error",
                "message": data.get("error") or "",
                "provider_status": data.get("provider_status"),
                "provider_code": data.get("provider_code"),
            }
            return [Part("error", error)], True
        return out, bool(data.get("final"))


class LangGraphStreams:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        feed: RunFeed,
    ) -> None:
        self.sessions = sessions
        self.feed = feed

    async def parts(
        self,
        run: LangGraphRun,
        owner_id: str,
        modes: Sequence[str],
        *,
        after: Cursor,
        with_ids: bool,
        keepalive: float,
        stop: asyncio.Event,
    ) -> AsyncIterator[Part | None]:
        """The run's parts (None: a keep-alive); ends with the run, or when ``stop`` is set."""
        yield Part("metadata", {"run_id": str(run.run_id), "attempt": 1})
        state = _Translation(run, frozenset(modes) & SERVED_MODES)
        agent_run = run.run
        while agent_run is None:  # pending: wait (FIFO) for a worker to take it
            assert run.request is not None
            view = await self.feed.wait_request(run.request.id, owner_id, keepalive, stop=stop)
            if view.request.status == RequestStatus.CANCELLED or stop.is_set():
                return
            agent_run = view.run
            if agent_run is None:
                yield None  # still queued: a keep-alive
        start = after.event_id
        if run.request is None and start == 0:  # a resume: from the run's latest ``resumed``
            start = await self._resumed_at(agent_run.id)
        state.history = await self._history_until(run)
        if "values" in state.modes and after.event_id == 0 and after.index < 0:
            first_values = state.values()  # the state the run starts from: before any event
            yield Part(first_values.event, first_values.data, "0-0" if with_ids else None)
        # Resuming inside an event (some of its parts were seen): read that event again.
        first = max(0, start - 1) if after.index >= 0 else start
        feed = self.feed.follow(agent_run.id, owner_id, first, keepalive=keepalive, stop=stop)
        async for events in feed:
            if not events:
                yield None
            for event in events:
                new = await self._new_messages(state, event)
                parts, ends = state.parts(event, new)
                for index, part in enumerate(parts):
                    if event.id == after.event_id and index <= after.index:
                        continue  # seen before the client reconnected
                    yield Part(part.event, part.data, f"{event.id}-{index}" if with_ids else None)
                if ends:
                    return

    async def _new_messages(self, state: _Translation, event: RunEvent) -> list[Message]:
        """The message a ``message`` event names; added to the history unless already there
        (a stream that joins late, or resumes, read it with the history)."""
        if event.type != "message":
            return []
        async with self.sessions() as session:
            found = await MessageRepository(session).get(uuid.UUID(str(event.data["message_id"])))
        if found is None:
            return []
        if all(m.id != found.id for m in state.history):
            state.history.append(found)
        return [found]

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
