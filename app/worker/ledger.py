"""The run's ledger: what a run writes while it runs (messages, token usage, events), each write
under the run's lease, so a run recovered elsewhere stops writing instead of interleaving with
the thread's next run (LangGraph itself would let both write)."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Sequence
from typing import Any, cast

import msgspec
from langchain_core.messages import AIMessage, BaseMessage, RemoveMessage, ToolMessage
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.agents.state_values import graph_values
from app.compression.messages import message_text
from app.compression.storable import storable_text, storable_value
from app.compression.summary_messages import is_summary_message
from app.compression.tokens import run_usage
from app.db.driver import driver
from app.db.run_events import (
    CompressionEvent,
    CustomEvent,
    DeltaEvent,
    GraphStreamEvent,
    MessageAddedEvent,
    MessageRole,
    ProviderRetryEvent,
    StateEvent,
    UpdateEvent,
    event_row,
    hitl_request,
)
from app.repositories.messages import MessageRepository, NewMessage
from app.repositories.run_events import ActivityEvent
from app.repositories.run_steps import RunStepRepository, StepMessage

#: The graph's custom stream events a run stores, by their ``type``.
CUSTOM_EVENTS: dict[str, type[CompressionEvent | ProviderRetryEvent]] = {
    "compression": CompressionEvent,
    "provider_retry": ProviderRetryEvent,
}


class LeaseLost(Exception):
    """This worker no longer holds the run (recovered elsewhere, or cancelled)."""


def json_safe(value: Any) -> Any:
    """Plain JSON values PostgreSQL can store (``json`` round-trips a lone surrogate as one)."""
    return storable_value(json.loads(json.dumps(value, default=str)))


def storable_id(value: str | None) -> str | None:
    """Ids and names come from the provider too (a tool call's id, a completion id)."""
    return None if value is None else storable_text(value)


def interrupt_payload(interrupts: Any) -> Any:
    """The stored/streamed form of pending LangGraph interrupts: one HITLRequest (the
    action requests and review configs of several pending interrupts, in order)."""
    values = [getattr(i, "value", i) for i in interrupts]
    if len(values) == 1:
        return json_safe(values[0])
    if not all(hitl_request(v) is not None for v in values):
        return json_safe(values)  # several interrupt(value) of an own graph: all of them
    return json_safe(
        {
            "action_requests": [a for v in values for a in v.get("action_requests", [])],
            "review_configs": [c for v in values for c in v.get("review_configs", [])],
        }
    )


def message_row(run_id: uuid.UUID, m: BaseMessage) -> NewMessage:
    """An AI or tool message of the run as a row of the full history."""
    if isinstance(m, AIMessage):
        calls = [{"id": c.get("id"), "name": c["name"], "args": c["args"]} for c in m.tool_calls]
        return NewMessage(
            role="assistant",
            content=storable_text(message_text(m)),
            lc_id=storable_id(m.id),
            tool_calls=json_safe(calls) or None,
            run_id=run_id,
        )
    assert isinstance(m, ToolMessage)
    return NewMessage(
        role="tool",
        content=storable_text(message_text(m)),
        lc_id=storable_id(m.id),
        tool_call_id=storable_text(m.tool_call_id),
        tool_name=storable_id(m.name),
        run_id=run_id,
    )


def message_event_data(message_id: uuid.UUID, row: NewMessage) -> dict[str, Any]:
    """The ``message`` event of a message about to be stored, without its ``type`` and ``seq``
    (the step statement adds the number the message gets). It names the message; its content
    is read from the history, not copied into the event log."""
    data: dict[str, Any] = msgspec.to_builtins(
        MessageAddedEvent(
            type="message",
            message_id=message_id,
            seq=0,
            role=cast(MessageRole, row.role),
        )
    )
    data.pop("type")
    data.pop("seq")
    return data


def custom_event(chunk: Any) -> CompressionEvent | ProviderRetryEvent | CustomEvent:
    """A custom stream event of the graph as the event the run stores: Threadkeeper's own
    (compression, provider retries) typed; anything else a node wrote with
    ``get_stream_writer()`` as it is (``custom``)."""
    kind = CUSTOM_EVENTS.get(str(chunk.get("type"))) if isinstance(chunk, dict) else None
    if kind is not None:
        try:
            return msgspec.convert(json_safe(chunk), kind)
        except msgspec.ValidationError:
            pass  # a graph's own event that happens to use one of our type names
    return CustomEvent(type="custom", data=json_safe(chunk))


def _jsonable(value: Any) -> Any:
    """A value LangGraph streams (messages, tasks, interrupts, sends) as plain JSON."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def _graph_json(chunk: Any) -> Any:
    """What LangGraph streamed, as the JSON its server sends (messages as their dicts)."""
    return storable_value(json.loads(json.dumps(chunk, default=_jsonable)))


def graph_stream_event(mode: str, chunk: Any) -> GraphStreamEvent:
    """A ``tasks`` / ``checkpoints`` / ``debug`` chunk as the event the run stores."""
    return GraphStreamEvent(type="graph", mode=mode, data=_graph_json(chunk))


def update_event(node: str, update: Any) -> UpdateEvent:
    """A node's update of a graph of the user's own (an ``updates`` chunk's entry) as the
    ``update`` event the run stores."""
    return UpdateEvent(type="update", node=storable_text(node), update=_graph_json(update))


def state_event(values: Any, keys: frozenset[str] | None = None) -> StateEvent:
    """A graph's state keys besides ``messages`` (a ``values`` chunk, or a snapshot's
    ``values``; only ``keys`` when named: the graph's output schema) as the ``state`` event
    the run stores."""
    if keys is not None and isinstance(values, dict):
        values = {k: v for k, v in values.items() if k in keys}
    return StateEvent(type="state", values=json_safe(graph_values(values)))


def new_messages(update: Any) -> list[BaseMessage]:
    """The AI and tool messages of a graph update (summaries and removals are model-view only)."""
    updates = update if isinstance(update, list) else [update]
    found: list[BaseMessage] = []
    for u in updates:
        if not isinstance(u, dict):
            continue
        sent = u.get("messages") or []
        for m in sent if isinstance(sent, list | tuple) else [sent]:
            if isinstance(m, RemoveMessage) or is_summary_message(m):
                continue
            if isinstance(m, (AIMessage, ToolMessage)):
                found.append(m)
    return found


class DeltaBuffer:
    """Coalesces streamed tokens into few ``delta`` events: one row per ``interval`` seconds or
    ``max_chars`` characters (and at each step's end), not one per token."""

    def __init__(self, interval: float = 0.2, max_chars: int = 2000) -> None:
        self.interval = interval
        self.max_chars = max_chars
        self._parts: dict[str | None, list[str]] = {}
        #: The graph node whose model call streamed each message.
        self._nodes: dict[str | None, str] = {}
        self._chars = 0
        self._since = time.monotonic()

    def add(self, lc_id: str | None, text: str, node: str | None = None) -> None:
        if text:
            self._parts.setdefault(lc_id, []).append(text)
            self._chars += len(text)
            if node is not None:
                self._nodes[lc_id] = node

    def due(self) -> bool:
        return bool(self._parts) and (
            self._chars >= self.max_chars or time.monotonic() - self._since >= self.interval
        )

    def withdraw(self, lc_ids: set[str | None]) -> None:
        """Drop the text not yet drained of these messages (a model call's failed attempt)."""
        for lc_id in lc_ids:
            parts = self._parts.pop(lc_id, None)
            self._chars -= sum(len(p) for p in parts or ())

    def drain(self) -> list[DeltaEvent]:
        out = [
            DeltaEvent(
                type="delta",
                lc_id=storable_id(k),
                text=storable_text("".join(v)),
                node=storable_id(self._nodes.get(k)),
            )
            for k, v in self._parts.items()
        ]
        self._parts.clear()
        self._chars = 0
        self._since = time.monotonic()
        return out


class RunLedger:
    """Each write is one statement on a bare connection (app/repositories/run_steps.py): a
    graph step's messages, usage and events, with the lease check folded in."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        holder: str,
        lease_seconds: float,
        *,
        engine: AsyncEngine,
    ) -> None:
        self.sessions = sessions
        # The sessions' engine: steps need no ORM session, only a connection.
        self.engine = engine
        self.holder = holder
        self.lease_seconds = lease_seconds

    async def write_step(
        self,
        thread_id: uuid.UUID,
        run_id: uuid.UUID,
        messages: Sequence[BaseMessage] = (),
        events: Sequence[ActivityEvent] = (),
    ) -> int:
        """One step's writes in one statement; how many messages were new. Raises LeaseLost
        (having written nothing) when this worker no longer holds the run."""
        rows = step_messages(run_id, messages)
        async with driver(self.engine) as conn:
            result = await RunStepRepository(conn).write(
                thread_id=thread_id,
                run_id=run_id,
                holder=self.holder,
                messages=rows,
                events=[event_row(e) for e in events],
                lock_timeout_ms=int(self.lease_seconds * 1000),
            )
        if not result.leased:
            raise LeaseLost(f"run {run_id} is no longer leased to this worker")
        return result.stored

    async def check_lease(self, thread_id: uuid.UUID, run_id: uuid.UUID) -> None:
        await self.write_step(thread_id, run_id)

    async def append(
        self, thread_id: uuid.UUID, run_id: uuid.UUID, events: Sequence[ActivityEvent]
    ) -> None:
        if events:
            await self.write_step(thread_id, run_id, events=events)

    async def stored_tool_results(
        self, thread_id: uuid.UUID, tool_call_ids: Sequence[str]
    ) -> dict[str, ToolMessage]:
        """The full history's results of these tool calls, as the tool messages they were."""
        async with self.sessions() as session:
            rows = await MessageRepository(session).tool_results(thread_id, tool_call_ids)
        return {
            call_id: ToolMessage(
                content=row.content,
                tool_call_id=call_id,
                name=row.tool_name,
                id=row.lc_id or f"repair-{call_id}",
            )
            for call_id, row in rows.items()
        }

    async def persist_update(
        self,
        thread_id: uuid.UUID,
        run_id: uuid.UUID,
        update: Any,
        events: Sequence[ActivityEvent] = (),
    ) -> None:
        """A graph update's new AI/tool messages, with ``events`` (streamed before them):
        stored, counted, announced, in one statement."""
        new = new_messages(update)
        if new or events:
            await self.write_step(thread_id, run_id, new, events)


def step_messages(run_id: uuid.UUID, messages: Sequence[BaseMessage]) -> list[StepMessage]:
    """The step's messages as rows (the first of each LangChain id), usage on AI messages."""
    out: list[StepMessage] = []
    seen: set[str] = set()
    for m in messages:
        row = message_row(run_id, m)
        if row.lc_id is not None:
            if row.lc_id in seen:
                continue
            seen.add(row.lc_id)
        usage = run_usage([m]) if isinstance(m, AIMessage) else None
        message_id = uuid.uuid4()
        out.append(
            StepMessage(
                id=message_id,
                role=row.role,
                content=row.content,
                lc_id=row.lc_id,
                event=message_event_data(message_id, row),
                tool_calls=row.tool_calls,
                tool_call_id=row.tool_call_id,
                tool_name=row.tool_name,
                input_tokens=usage.input_tokens if usage else 0,
                output_tokens=usage.output_tokens if usage else 0,
                calls=usage.calls if usage else 0,
            )
        )
    return out
