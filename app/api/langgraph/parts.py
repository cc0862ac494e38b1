"""A run's progress (``LangGraphStreams.follow``) as LangGraph stream parts.

``metadata`` first; token deltas -> ``messages`` tuples ``[AIMessageChunk, {langgraph_node}]``;
persisted messages -> ``updates`` / ``values`` (the full history so far; a graph of the user's
own: each node's update as it returned it, its ``values`` one per step); compression ->
``custom`` ``threadkeeper.compression``; an approval interrupt -> ``__interrupt__`` in
``values``/``updates``; a failure -> ``error {error, message}``. Then the stream ends (no
``end`` event). Part ids are ``<event id>-<n>`` (the n-th part made from that event; the state
the run starts from is ``0-0``), so a ``Last-Event-ID`` resumes exactly after the part the
client saw.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import msgspec

from app.db.models import Message, RunEvent
from app.db.run_events import GRAPH_STREAM_MODES
from app.domain.errors import ValidationFailed
from app.services.langgraph.runs import LangGraphRun
from app.services.langgraph.stream import LangGraphStreams, RunStart

from .presenters import MODEL_NODE, chunk_json, interrupt_out, message_out, node_of
from .responses import InterruptOut, RunValuesOut, StreamErrorOut

#: LangGraph's own stream modes the worker records when a run names them (``graph`` events),
#: passed through as LangGraph streamed them.
#: Stream modes with parts of their own (``events`` is refused when a run is created).
#: ``messages`` (the legacy mode) is served like ``messages-tuple``.
SERVED_MODES = (
    frozenset({"values", "updates", "messages-tuple", "messages", "custom"}) | GRAPH_STREAM_MODES
)
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
    """Per-stream state: the history shown in ``values``, the AI messages already streamed and,
    for a graph of the user's own, its state keys besides ``messages``."""

    run: LangGraphRun
    modes: frozenset[str]
    history: list[Message] = field(default_factory=list)
    streamed: set[str] = field(default_factory=set)
    #: A graph of the user's own: its state keys as its latest ``state`` event gave them; its
    #: ``values`` parts come one per step, as LangGraph sends them. None: an agent Threadkeeper
    #: assembles (no state of its own: a ``values`` part follows each stored message).
    state: dict[str, Any] | None = None
    #: A ``state`` event was seen (a run stored before they existed has none).
    stated: bool = False

    def values(self, interrupt: list[InterruptOut] | None = None) -> Part:
        messages = [message_out(m) for m in self.history]
        out = RunValuesOut(messages=messages, interrupt=interrupt)
        if self.state is None:
            return Part("values", out)
        # The graph's own keys beside the history, in LangGraph's order (messages first).
        plain: dict[str, Any] = msgspec.to_builtins(out)
        return Part("values", {"messages": plain.pop("messages", []), **self.state, **plain})

    def meta(self, node: str) -> dict[str, Any]:
        return {
            "langgraph_node": node,
            "run_id": str(self.run.run_id),
            "thread_id": str(self.run.thread_id),
            "assistant_id": self.run.assistant_id,
        }

    def seen(self, message: Message | None) -> list[Message]:
        """The message an event names, added to the history unless already there (a stream
        that joins late, or resumes, read it with the history)."""
        if message is None:
            return []
        if all(m.id != message.id for m in self.history):
            self.history.append(message)
        return [message]

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
                node, as_out = node_of(m.role), message_out(m)
                if "updates" in self.modes and self.state is None:  # own graphs: ``update``
                    out.append(Part("updates", {node: {"messages": [as_out]}}))
                if self.modes & {"messages-tuple", "messages"} and (m.lc_id not in self.streamed):
                    out.append(Part("messages", [as_out, self.meta(node)]))
            if new and "values" in self.modes and self.state is None:
                out.append(self.values())
        elif event.type == "state":  # a step of a graph of the user's own ended
            if self.state is not None:
                self.state, self.stated = dict(data.get("values") or {}), True
                if "values" in self.modes:
                    out.append(self.values())
        elif event.type == "update":  # a node of a graph of the user's own, as it returned
            if "updates" in self.modes:
                out.append(Part("updates", {str(data.get("node")): data.get("update")}))
        elif event.type in ("compression", "provider_retry"):
            if "custom" in self.modes:
                out.append(Part("custom", {**data, "type": f"threadkeeper.{event.type}"}))
        elif event.type == "custom":  # a node's get_stream_writer() output, as it wrote it
            if "custom" in self.modes:
                out.append(Part("custom", data.get("data")))
        elif event.type == "graph":  # tasks / checkpoints / debug, as LangGraph streamed them
            if data.get("mode") in self.modes:
                out.append(Part(str(data["mode"]), data.get("data")))
        elif event.type == "status":
            return self._status(event, data)
        return out, False

    def _status(self, event: RunEvent, data: dict[str, Any]) -> tuple[list[Part], bool]:
        status, out = data.get("status"), []
        if status == "interrupted":
            value = data.get("interrupt") or data.get("interrupt_value")
            interrupt = [interrupt_out(value, str(event.run_id))]
            if "updates" in self.modes:
                out.append(Part("updates", {"__interrupt__": interrupt}))
            if "values" in self.modes:
                out.append(self.values(interrupt))
            return out, True
        if status == "failed":
            error = StreamErrorOut(
                error=data.get("error_code") or "error",
                message=data.get("error") or "",
                provider_status=data.get("provider_status"),
                provider_code=data.get("provider_code"),
            )
            return [Part("error", error)], True
        final = bool(data.get("final"))
        if final and self.state is not None and not self.stated and "values" in self.modes:
            out.append(self.values())  # a run stored without ``state`` events: its history
        return out, final


async def stream_parts(
    streams: LangGraphStreams,
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
    # Resuming inside an event (some of its parts were seen): read that event again.
    first = max(0, after.event_id - 1) if after.index >= 0 else after.event_id
    items = streams.follow(run, owner_id, first, keepalive=keepalive, stop=stop)
    async for item in items:
        if item is None:
            yield None
        elif isinstance(item, RunStart):
            state.history, state.state = item.history, item.state
            # A graph of the user's own sends its first values itself (its ``state`` event).
            fresh = after.event_id == 0 and after.index < 0
            if "values" in state.modes and fresh and item.state is None:
                start = state.values()  # the state the run starts from: before any event
                yield Part(start.event, start.data, "0-0" if with_ids else None)
        else:
            event = item.event
            parts, ends = state.parts(event, state.seen(item.message))
            for index, part in enumerate(parts):
                if event.id == after.event_id and index <= after.index:
                    continue  # seen before the client reconnected
                yield Part(part.event, part.data, f"{event.id}-{index}" if with_ids else None)
            if ends:
                return


async def final_values(parts: AsyncIterator[Part | None]) -> RunValuesOut:
    """What /wait and /join answer: the last ``values`` (with ``__interrupt__`` when the run
    stopped for approval), or with ``__error__`` when it failed. A graph of the user's own
    has its state keys there too (a JSON object with more keys than the document names)."""
    last: RunValuesOut | dict[str, Any] = RunValuesOut()
    async for part in parts:
        if part is None:
            continue
        if part.event == "values":
            last = part.data
        elif part.event == "error":
            if isinstance(last, dict):
                return cast(RunValuesOut, {**last, "__error__": part.data})
            return RunValuesOut(messages=last.messages, interrupt=last.interrupt, error=part.data)
    return cast(RunValuesOut, last)
