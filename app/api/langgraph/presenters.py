"""Threadkeeper's records as LangGraph Agent Server bodies (``responses``): messages, threads,
thread state, runs, assistants."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import msgspec

from app.agents.info import AgentInfo
from app.db.models import AgentRun, Message
from app.db.run_events import hitl_request
from app.services.context_compression import CompressionReport
from app.services.langgraph.runs import LangGraphRun
from app.services.langgraph.threads import PastState, StateRecord, ThreadRecord

from .responses import (
    AIMessageOut,
    AssistantOut,
    AssistantSchemasOut,
    CheckpointOut,
    CompressOut,
    GraphEdgeOut,
    GraphNodeOut,
    GraphOut,
    HumanMessageOut,
    InterruptOut,
    ManualCompressionOut,
    MessageOut,
    RunFailureOut,
    RunOut,
    StateValuesOut,
    TaskOut,
    ThreadkeeperValuesOut,
    ThreadOut,
    ThreadStateOut,
    ThreadValuesOut,
    ToolCallOut,
    ToolMessageOut,
)

#: The agent's nodes as LangGraph names them (langchain's create_agent): what the tuple
#: metadata and ``updates`` name.
MODEL_NODE = "model"
TOOLS_NODE = "tools"
#: Assistants have no lifecycle of their own (they are configuration): one fixed timestamp.
_EPOCH = datetime(2025, 1, 1, tzinfo=UTC)
#: The graph's input/output: LangGraph's MessagesState (what the UI renders).
MESSAGES_STATE_SCHEMA: dict[str, Any] = {
    "title": "MessagesState",
    "type": "object",
    "properties": {"messages": {"type": "array", "items": {"type": "object"}}},
    "required": ["messages"],
}


def node_of(role: str) -> str:
    return TOOLS_NODE if role == "tool" else MODEL_NODE


def message_out(m: Message) -> MessageOut:
    """A persisted message as a serialized LangChain message (``type`` human / ai / tool)."""
    lc_id = m.lc_id or str(m.id)
    if m.role == "user":
        return HumanMessageOut(content=m.content, id=lc_id)
    if m.role == "tool":
        return ToolMessageOut(
            content=m.content, id=lc_id, name=m.tool_name, tool_call_id=m.tool_call_id
        )
    calls = [
        ToolCallOut(name=c.get("name"), args=c.get("args") or {}, id=c.get("id"))
        for c in (m.tool_calls or [])
    ]
    return AIMessageOut(content=m.content, id=lc_id, tool_calls=calls)


def messages_out(rows: list[Message]) -> list[MessageOut]:
    return [message_out(m) for m in rows]


def chunk_json(lc_id: str | None, text: str) -> dict[str, Any]:
    """A streamed token delta as LangChain's serialized AIMessageChunk."""
    return {
        "content": text,
        "additional_kwargs": {},
        "response_metadata": {},
        "type": "AIMessageChunk",
        "name": None,
        "id": lc_id,
        "tool_calls": [],
        "invalid_tool_calls": [],
        "tool_call_chunks": [],
        "usage_metadata": None,
    }


def interrupt_out(value: Any, interrupt_id: str) -> InterruptOut:
    """The interrupt's value as LangGraph's server returns it, whether read from the run row
    or an event: a graph's own ``interrupt(value)`` as raised; a HITLRequest in its typed
    shape, its optional keys (LangChain's ``NotRequired``) left out when unset."""
    typed = hitl_request(value)
    if typed is None:
        return InterruptOut(value=value, id=interrupt_id)
    plain: dict[str, Any] = msgspec.to_builtins(typed)
    for item in [*plain["action_requests"], *plain["review_configs"]]:
        for key in _UNSET_WHEN_NONE & item.keys():
            if item[key] is None:
                del item[key]
    return InterruptOut(value=plain, id=interrupt_id)


#: HITLRequest keys LangChain leaves out rather than send as null.
_UNSET_WHEN_NONE = frozenset({"description", "args_schema"})


def run_interrupts(run: AgentRun | None) -> list[InterruptOut]:
    """The interrupt of a run waiting for approval; its id is the run's (the stream's
    ``__interrupt__`` names it the same way)."""
    if run is None or run.interrupt is None:
        return []
    return [interrupt_out(run.interrupt, str(run.id))]


def thread_out(record: ThreadRecord) -> ThreadOut:
    c = record.conversation
    interrupts = run_interrupts(record.interrupted)
    return ThreadOut(
        thread_id=str(c.id),
        created_at=c.created_at,
        updated_at=c.updated_at,
        metadata=record.metadata,
        status=record.status,
        config={},
        values=ThreadValuesOut(messages=messages_out(record.messages)),
        interrupts={i.id: [i] for i in interrupts},
    )


def checkpoint_out(thread_id: str, checkpoint_id: str | None) -> CheckpointOut:
    return CheckpointOut(thread_id=thread_id, checkpoint_ns="", checkpoint_id=checkpoint_id)


def task_out(task: Any) -> TaskOut:
    """A LangGraph ``PregelTask`` as the Agent Server API shows it."""
    error = getattr(task, "error", None)
    return TaskOut(
        id=str(task.id),
        name=str(task.name),
        path=[str(p) for p in getattr(task, "path", ()) or ()],
        error=None if error is None else repr(error),
        interrupts=[
            InterruptOut(value=getattr(i, "value", None), id=str(getattr(i, "id", "")))
            for i in getattr(task, "interrupts", ()) or ()
        ],
    )


def past_state_out(record: PastState) -> ThreadStateOut:
    """An earlier checkpoint's state (the head's is the thread's state, with Threadkeeper's
    extras): its values with the chat as it stood there, LangGraph's own next and tasks."""
    tid, snapshot = str(record.conversation.id), record.snapshot
    tasks = [task_out(t) for t in snapshot.tasks]
    # No ``threadkeeper`` key: Threadkeeper's view is the head's (the document names it).
    values = cast(StateValuesOut, {**snapshot.values, "messages": messages_out(list(record.chat))})
    return ThreadStateOut(
        values=values,
        next=list(snapshot.next),
        tasks=tasks,
        checkpoint=checkpoint_out(tid, snapshot.checkpoint_id),
        parent_checkpoint=(
            checkpoint_out(tid, snapshot.parent_checkpoint_id)
            if snapshot.parent_checkpoint_id
            else None
        ),
        metadata={
            **record.metadata,
            "source": snapshot.source,
            "step": snapshot.metadata.get("step"),
            "parents": snapshot.metadata.get("parents") or {},
        },
        created_at=snapshot.created_at,
        interrupts=[i for t in tasks for i in t.interrupts],
    )


def state_out(record: StateRecord | PastState) -> ThreadStateOut:
    """The head state: ``values.messages`` is the FULL history (what a chat UI shows); the
    model's compressed view and the context pressure are under ``values.threadkeeper``."""
    if isinstance(record, PastState):
        return past_state_out(record)
    tid, view, snapshot = str(record.conversation.id), record.view, record.snapshot
    interrupts = run_interrupts(record.interrupted)
    # The node(s) waiting on the interrupt, as the thread's own graph names them.
    waiting = list(snapshot.next) or [MODEL_NODE] if interrupts else []
    tasks = [
        TaskOut(id=i.id, name=waiting[0], path=[], error=None, interrupts=[i]) for i in interrupts
    ]
    values = StateValuesOut(
        messages=messages_out(record.history),
        threadkeeper=ThreadkeeperValuesOut(
            model_view=view.messages,
            input_tokens=view.input_tokens,
            summary_threshold=view.summary_threshold,
            pressure=view.pressure,
            pressure_reason=view.pressure_reason,
            compression_suggested=view.compression_suggested,
            summary_present=view.summary_present,
            summarized_messages=view.summarized_messages,
            manual_compression=ManualCompressionOut(
                available=view.manual_available, reason=view.manual_reason
            ),
        ),
    )
    if view.values:
        # A graph of the user's own: its other state keys too, as it keeps them (the document
        # names the two keys every thread has; a JSON object may carry more).
        values = cast(StateValuesOut, {**view.values, **msgspec.structs.asdict(values)})
    return ThreadStateOut(
        values=values,
        next=waiting,
        tasks=tasks,
        checkpoint=checkpoint_out(tid, snapshot.checkpoint_id),
        parent_checkpoint=(
            checkpoint_out(tid, snapshot.parent_checkpoint_id)
            if snapshot.parent_checkpoint_id
            else None
        ),
        metadata={**record.metadata, "source": "loop", "step": len(record.history)},
        created_at=snapshot.created_at or record.conversation.updated_at.isoformat(),
        interrupts=interrupts,
    )


def run_out(run: LangGraphRun) -> RunOut:
    failure = run.failure
    return RunOut(
        run_id=str(run.run_id),
        thread_id=str(run.thread_id),
        assistant_id=run.assistant_id,
        created_at=run.created_at,
        updated_at=run.updated_at,
        status=run.status,
        metadata={},
        kwargs={},
        multitask_strategy="enqueue",
        threadkeeper=RunFailureOut(
            error_code=failure.error_code if failure else None,
            provider_status=failure.provider_status if failure else None,
            provider_code=failure.provider_code if failure else None,
        ),
    )


def assistant_out(agent: AgentInfo) -> AssistantOut:
    return AssistantOut(
        assistant_id=agent.id,
        graph_id=agent.id,
        name=agent.name,
        description=agent.description,
        config={},
        context={},
        metadata={},
        version=1,
        created_at=_EPOCH,
        updated_at=_EPOCH,
    )


def schemas_out(agent: AgentInfo, graph: Any = None) -> AssistantSchemasOut:
    """The assembled agent's MessagesState; a graph of the user's own describes itself."""
    if graph is not None:
        return AssistantSchemasOut(
            graph_id=agent.id,
            input_schema=graph.get_input_jsonschema(),
            output_schema=graph.get_output_jsonschema(),
            state_schema=graph.get_output_jsonschema(),
            config_schema={"title": "Config", "type": "object", "properties": {}},
            context_schema=graph.get_context_jsonschema(),
        )
    return AssistantSchemasOut(
        graph_id=agent.id,
        input_schema=MESSAGES_STATE_SCHEMA,
        output_schema=MESSAGES_STATE_SCHEMA,
        state_schema=MESSAGES_STATE_SCHEMA,
        config_schema={"title": "Config", "type": "object", "properties": {}},
        context_schema={"title": "Context", "type": "object", "properties": {}},
    )


def graph_out(graph: Any = None) -> GraphOut:
    """The agent loop as LangGraph draws it: model <-> tools; a graph of the user's own as
    LangGraph draws it."""
    if graph is not None:
        return msgspec.convert(graph.get_graph().to_json(), GraphOut)
    nodes = ["__start__", MODEL_NODE, TOOLS_NODE, "__end__"]
    edges = [
        ("__start__", MODEL_NODE, False),
        (MODEL_NODE, TOOLS_NODE, True),
        (TOOLS_NODE, MODEL_NODE, False),
        (MODEL_NODE, "__end__", True),
    ]
    return GraphOut(
        nodes=[GraphNodeOut(id=n, type="runnable", data=n) for n in nodes],
        edges=[GraphEdgeOut(source=s, target=t, conditional=c) for s, t, c in edges],
    )


def compress_out(r: CompressionReport) -> CompressOut:
    return CompressOut(
        before_tokens=r.before_tokens,
        after_tokens=r.after_tokens,
        offloaded=r.offloaded,
        summarized=r.summarized,
    )
