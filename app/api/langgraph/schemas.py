"""Request bodies of the LangGraph surface, as langgraph-sdk sends them.

Not ``forbid_unknown_fields``: the SDKs send optional fields of LangGraph's own platform
(feedback_keys, ...); every run field that changes what a run does is read, typed (a malformed
one is a 422) and either honoured or refused with 422 ``not_supported`` naming it.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

import msgspec

Metadata = Annotated[
    dict[Annotated[str, msgspec.Meta(max_length=100)], Any], msgspec.Meta(max_length=64)
]
Limit = Annotated[int, msgspec.Meta(ge=1, le=1000)]
Offset = Annotated[int, msgspec.Meta(ge=0)]


class Body(msgspec.Struct, kw_only=True):
    pass


class AssistantSearchIn(Body):
    graph_id: str | None = None
    name: str | None = None
    metadata: Metadata | None = None
    limit: Limit = 10
    offset: Offset = 0


class AssistantCountIn(Body):
    graph_id: str | None = None
    name: str | None = None
    metadata: Metadata | None = None


class ThreadCreateIn(Body):
    thread_id: uuid.UUID | None = None
    metadata: Metadata | None = None
    if_exists: Literal["raise", "do_nothing"] = "raise"


class ThreadPatchIn(Body):
    metadata: Metadata = msgspec.field(default_factory=dict)


ThreadStatusName = Literal["idle", "busy", "interrupted", "error"]


class ThreadSearchIn(Body):
    metadata: Metadata | None = None
    ids: list[uuid.UUID] | None = None
    status: ThreadStatusName | None = None
    limit: Limit = 10
    offset: Offset = 0
    sort_by: Literal["thread_id", "created_at", "updated_at"] | None = None
    sort_order: Literal["asc", "desc"] | None = None


class ThreadCountIn(Body):
    metadata: Metadata | None = None
    status: ThreadStatusName | None = None


class HistoryIn(Body):
    limit: Limit = 10
    #: Only states older than this checkpoint (its id, or ``{checkpoint_id}``): the next page.
    before: str | CheckpointIn | None = None


class TextBlock(msgspec.Struct, kw_only=True):
    type: Literal["text"]
    text: str


class InputMessage(msgspec.Struct, kw_only=True):
    """A human message: ``role`` user/human (or ``type`` human), text or text content blocks."""

    role: Literal["user", "human"] | None = None
    type: Literal["human"] | None = None
    content: str | list[TextBlock]
    id: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None


class RunInputIn(msgspec.Struct, kw_only=True):
    messages: Annotated[list[InputMessage], msgspec.Meta(min_length=1, max_length=1)]


class CommandIn(Body):
    resume: Any = None
    update: Any = None
    goto: Any = None


class CheckpointIn(Body):
    checkpoint_id: str | None = None
    checkpoint_ns: str | None = None


StreamModeName = Literal[
    "values",
    "updates",
    "messages",
    "messages-tuple",
    "custom",
    "events",
    "debug",
    "tasks",
    "checkpoints",
]


class RunCreateIn(Body):
    assistant_id: Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
    #: `{messages: [one human message]}`, or `{}` / null with `command.resume`.
    input: dict[str, Any] | None = None
    command: CommandIn | None = None
    stream_mode: StreamModeName | list[StreamModeName] = "values"
    stream_subgraphs: bool = False
    stream_resumable: bool = False
    metadata: Metadata | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    checkpoint: CheckpointIn | None = None
    checkpoint_id: str | None = None
    multitask_strategy: Literal["enqueue", "reject", "interrupt", "rollback"] = "enqueue"
    on_disconnect: Literal["cancel", "continue"] = "continue"
    if_not_exists: Literal["reject", "create"] = "reject"
    interrupt_before: Any = None
    interrupt_after: Any = None
    after_seconds: Any = None
    #: POSTed the run when it ends (``app/services/langgraph/webhooks.py``).
    webhook: Annotated[str, msgspec.Meta(max_length=2000)] | None = None


class StateAtIn(Body):
    """``POST /threads/{id}/state/checkpoint``: the state at ``checkpoint``."""

    checkpoint: CheckpointIn
    subgraphs: bool = False
