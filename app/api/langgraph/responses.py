"""Response bodies of the LangGraph surface, typed, so ``/langgraph/openapi.json`` describes
every answer (LangGraph's own Agent Server shapes; ``metadata``, ``config``, graph schemas and
interrupt values stay open objects, as they are there)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

Json = dict[str, Any]
RunStatusName = Literal["pending", "running", "success", "error", "interrupted"]
ThreadStatusName = Literal["idle", "busy", "interrupted", "error"]


class Out(msgspec.Struct, kw_only=True):
    pass


class InfoFlags(Out, kw_only=True):
    assistants: bool
    crons: bool
    langsmith: bool


class InfoHost(Out, kw_only=True):
    kind: str
    project_id: str | None = None
    revision_id: str | None = None


class InfoOut(Out, kw_only=True):
    version: str
    langgraph_py_version: str | None
    flags: InfoFlags
    host: InfoHost


class OkOut(Out, kw_only=True):
    ok: bool


class AssistantOut(Out, kw_only=True):
    """An assistant is a configured agent: ``assistant_id`` and ``graph_id`` are its id."""

    assistant_id: str
    graph_id: str
    name: str
    description: str | None
    config: Json
    context: Json
    metadata: Json
    version: int
    created_at: datetime
    updated_at: datetime


class AssistantSchemasOut(Out, kw_only=True):
    graph_id: str
    input_schema: Json
    output_schema: Json
    state_schema: Json
    config_schema: Json
    context_schema: Json


class GraphNodeOut(Out, kw_only=True):
    id: str
    type: str | None = None
    #: The node's name (the assembled agent), or what LangGraph draws of it (a graph of the
    #: user's own).
    data: Any = None


class GraphEdgeOut(Out, kw_only=True):
    source: str
    target: str
    conditional: bool = False
    data: Any = None


class GraphOut(Out, kw_only=True):
    nodes: list[GraphNodeOut]
    edges: list[GraphEdgeOut]


class _Message(Out, kw_only=True):
    """A persisted message as a serialized LangChain message."""

    content: str
    additional_kwargs: Json = msgspec.field(default_factory=dict)
    response_metadata: Json = msgspec.field(default_factory=dict)
    #: The LangChain id (the human message keeps the one its client chose).
    id: str
    name: str | None = None


class HumanMessageOut(_Message, tag="human", tag_field="type", kw_only=True):
    pass


class ToolCallOut(Out, kw_only=True):
    name: str | None
    args: Json
    id: str | None
    type: Literal["tool_call"] = "tool_call"


class AIMessageOut(_Message, tag="ai", tag_field="type", kw_only=True):
    tool_calls: list[ToolCallOut] = msgspec.field(default_factory=list)
    invalid_tool_calls: list[Json] = msgspec.field(default_factory=list)
    usage_metadata: Json | None = None


class ToolMessageOut(_Message, tag="tool", tag_field="type", kw_only=True):
    tool_call_id: str | None
    status: Literal["success", "error"] = "success"


MessageOut = HumanMessageOut | AIMessageOut | ToolMessageOut


class InterruptOut(Out, kw_only=True):
    """LangGraph's Interrupt: ``value`` is langchain's HITLRequest (``action_requests``,
    ``review_configs``); ``id`` is the interrupted run's."""

    value: Any
    id: str


class ThreadValuesOut(Out, kw_only=True):
    messages: list[MessageOut]


class ThreadOut(Out, kw_only=True):
    thread_id: str
    created_at: datetime
    updated_at: datetime
    #: The client's metadata, plus ``graph_id`` / ``assistant_id`` (the thread's agent, once
    #: chosen; derived, never stored as metadata).
    metadata: Json
    status: ThreadStatusName
    config: Json
    #: GetThread: the full history; SearchThreads: each thread's first message.
    values: ThreadValuesOut
    interrupts: dict[str, list[InterruptOut]]
    error: str | None = None


class ManualCompressionOut(Out, kw_only=True):
    available: bool
    reason: str | None


class ThreadkeeperValuesOut(Out, kw_only=True):
    """The model's compressed view and the context pressure (Threadkeeper's own)."""

    model_view: list[Json]
    input_tokens: int
    summary_threshold: int
    #: None when the next request cannot be counted (``pressure_reason`` says why).
    pressure: float | None
    pressure_reason: str | None = None
    compression_suggested: bool
    summary_present: bool
    summarized_messages: int
    manual_compression: ManualCompressionOut


class StateValuesOut(Out, kw_only=True):
    """The full history and Threadkeeper's view; a graph of the user's own adds its other
    state keys."""

    messages: list[MessageOut]
    threadkeeper: ThreadkeeperValuesOut


class CheckpointOut(Out, kw_only=True):
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str | None
    checkpoint_map: Json | None = None


class TaskOut(Out, kw_only=True):
    id: str
    #: The node that waits on the interrupt.
    name: str
    path: list[str]
    error: str | None
    interrupts: list[InterruptOut]
    checkpoint: CheckpointOut | None = None
    state: Json | None = None
    result: Json | None = None


class ThreadStateOut(Out, kw_only=True):
    values: StateValuesOut
    #: The node(s) waiting on the interrupt; empty when the thread waits for nothing.
    next: list[str]
    tasks: list[TaskOut]
    checkpoint: CheckpointOut
    parent_checkpoint: CheckpointOut | None
    metadata: Json
    created_at: str | None
    interrupts: list[InterruptOut]


class RunFailureOut(Out, kw_only=True):
    """Why a run failed (null fields otherwise): the same fields as /v1's Run."""

    error_code: str | None = None
    provider_status: int | None = None
    provider_code: str | None = None


class RunOut(Out, kw_only=True):
    run_id: str
    thread_id: str
    assistant_id: str
    created_at: datetime
    updated_at: datetime
    status: RunStatusName
    metadata: Json
    kwargs: Json
    multitask_strategy: Literal["enqueue", "reject"]
    threadkeeper: RunFailureOut


class StreamErrorOut(Out, kw_only=True):
    error: str
    message: str
    provider_status: int | None = None
    provider_code: str | None = None


class RunValuesOut(Out, omit_defaults=True, kw_only=True):
    """A run's final values (WaitRun, JoinRun): ``__interrupt__`` when it stopped for approval,
    ``__error__`` when it failed."""

    messages: list[MessageOut] = msgspec.field(default_factory=list)
    interrupt: list[InterruptOut] | None = msgspec.field(default=None, name="__interrupt__")
    error: StreamErrorOut | None = msgspec.field(default=None, name="__error__")


class CompressOut(Out, kw_only=True):
    before_tokens: int
    after_tokens: int
    offloaded: int
    summarized: bool


class StreamPartOut(Out, kw_only=True):
    """One server-sent event of a run stream: ``event`` is the part's kind (``metadata``,
    ``values``, ``updates``, ``messages``, ``custom``, ``error``), ``data`` its JSON, ``id``
    (``<event>-<n>``) sent with ``stream_resumable`` and on join streams."""

    event: str
    data: Any
    id: str | None = None
