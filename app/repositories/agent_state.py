"""Model-visible agent state, read and written ONLY through the compiled graph.

The checkpoint tables belong to LangGraph; going through ``aget_state``/``aupdate_state`` keeps
their format, channel versions and reducers LangGraph's business.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AnyMessage, BaseMessage, RemoveMessage, ToolMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.types import StateSnapshot


class CheckpointerRequired(RuntimeError):
    """A graph compiled without a checkpointer has no durable state to read or replace."""


@dataclass(frozen=True, slots=True)
class AgentStateSnapshot:
    messages: list[AnyMessage]
    next: tuple[str, ...]
    #: Pending LangGraph interrupts (a run waiting for a human decision).
    interrupts: tuple[Any, ...] = ()
    #: The head checkpoint's id and its parent's (None before the first run).
    checkpoint_id: str | None = None
    parent_checkpoint_id: str | None = None
    created_at: str | None = None
    #: The state's other keys (a graph of the user's own keeps its own), as LangGraph holds them.
    values: dict[str, Any] = field(default_factory=dict)
    #: The checkpoint's metadata (``source``: input | loop | update | fork, ``step``, ...).
    metadata: dict[str, Any] = field(default_factory=dict)
    #: LangGraph's ``PregelTask``s of the checkpoint (what runs next, their interrupts).
    tasks: tuple[Any, ...] = ()

    @property
    def source(self) -> str | None:
        return self.metadata.get("source")


def _checkpoint_id(config: Any) -> str | None:
    value = ((config or {}).get("configurable") or {}).get("checkpoint_id")
    return str(value) if value else None


def _snapshot(state: StateSnapshot) -> AgentStateSnapshot:
    values = state.values or {}
    return AgentStateSnapshot(
        messages=list(values.get("messages", [])),
        values={k: v for k, v in values.items() if k != "messages"},
        next=tuple(state.next or ()),
        interrupts=tuple(state.interrupts or ()),
        checkpoint_id=_checkpoint_id(state.config),
        parent_checkpoint_id=_checkpoint_id(state.parent_config),
        created_at=state.created_at,
        metadata=dict(state.metadata or {}),
        tasks=tuple(state.tasks or ()),
    )


class AgentStateRepository:
    def __init__(
        self, graph: Any, *, model_node: str | None = "model", tools_node: str | None = "tools"
    ) -> None:
        if getattr(graph, "checkpointer", None) in (None, False):
            raise CheckpointerRequired("the agent graph was compiled without a checkpointer")
        self.graph = graph
        #: The nodes writes are made as (None: LangGraph's choice, the last node that wrote;
        #: a graph of the user's own names its nodes as it likes).
        self.model_node = model_node
        self.tools_node = tools_node

    @staticmethod
    def config(thread_id: uuid.UUID | str) -> dict[str, Any]:
        return {"configurable": {"thread_id": str(thread_id)}}

    async def get(self, thread_id: uuid.UUID | str) -> AgentStateSnapshot:
        """LangGraph's live view (saved writes of unfinished steps included)."""
        return _snapshot(await self.graph.aget_state(self.config(thread_id)))

    async def history(
        self, thread_id: uuid.UUID | str, *, limit: int, before: str | None = None
    ) -> list[AgentStateSnapshot]:
        """The thread's checkpoints newest first (every branch: LangGraph's order), at most
        ``limit``, older than checkpoint ``before`` when given."""
        until = self.at_config(thread_id, before) if before else None
        return [
            _snapshot(state)
            async for state in self.graph.aget_state_history(
                self.config(thread_id), limit=limit, before=until
            )
        ]

    async def at(self, thread_id: uuid.UUID | str, checkpoint_id: str) -> AgentStateSnapshot | None:
        """The state at one checkpoint of the thread (None: the thread has no such one)."""
        state = await self.graph.aget_state(self.at_config(thread_id, checkpoint_id))
        if state.created_at is None or _checkpoint_id(state.config) != checkpoint_id:
            return None
        return _snapshot(state)

    @staticmethod
    def at_config(thread_id: uuid.UUID | str, checkpoint_id: str) -> dict[str, Any]:
        return {
            "configurable": {
                "thread_id": str(thread_id),
                "checkpoint_ns": "",
                "checkpoint_id": checkpoint_id,
            }
        }

    async def get_live_and_committed(
        self, thread_id: uuid.UUID | str
    ) -> tuple[AgentStateSnapshot, AgentStateSnapshot]:
        """The live view and the state the latest checkpoint itself holds (``committed_state``):
        what a run finished and what the next run starts from, when a run died mid-step."""
        live = await self.graph.aget_state(self.config(thread_id))
        return _snapshot(live), _snapshot(await committed_state(self.graph, live))

    async def replace_messages(
        self, thread_id: uuid.UUID | str, messages: Sequence[BaseMessage]
    ) -> None:
        """Swap the whole model view. ``as_node="model"`` keeps an idle thread idle (next == ())."""
        await self.graph.aupdate_state(
            self.config(thread_id),
            {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *messages]},
            as_node=self.model_node,
        )

    async def add_tool_results(
        self, thread_id: uuid.UUID | str, results: Sequence[ToolMessage]
    ) -> None:
        """Append tool results as if the tools node wrote them (the model step comes next)."""
        await self.graph.aupdate_state(
            self.config(thread_id), {"messages": list(results)}, as_node=self.tools_node
        )

    async def prune_history(self, thread_id: uuid.UUID | str) -> None:
        """Every step stores a checkpoint: keep the turn boundaries and branch heads a client
        can branch from (``aprune_turns``), else (another saver) only the latest."""
        checkpointer = self.graph.checkpointer
        turns = getattr(checkpointer, "aprune_turns", None)
        if turns is not None:
            await turns([str(thread_id)])
            return
        prune = getattr(checkpointer, "aprune", None)
        if prune is not None:
            await prune([str(thread_id)], strategy="keep_latest")

    async def delete_thread(self, thread_id: uuid.UUID | str) -> None:
        """Drop every checkpoint of a deleted thread (the checkpointer's own API)."""
        await self.graph.checkpointer.adelete_thread(str(thread_id))


async def committed_state(graph: Any, live: StateSnapshot) -> StateSnapshot:
    """The state as the latest checkpoint itself holds it.

    ``aget_state`` without a checkpoint id is LangGraph's "live" view: it adds the saved writes
    of tasks that finished after that checkpoint (a run that died mid-step leaves them) and
    leaves those tasks out of ``next``. A graph started with new input discards such writes, so
    whatever decides what the next run sends (the dangling-call repair, the retry point) must
    look at the committed state; asked with ``live``'s checkpoint id, LangGraph returns it.
    """
    if live.config is None or "checkpoint_id" not in live.config.get("configurable", {}):
        return live
    return await graph.aget_state(live.config)  # type: ignore[no-any-return]
