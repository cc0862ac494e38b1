"""What a run's events hold: the typed payloads of ``run_events`` rows.

One home for them at the bottom layer because the same structs are written by the run engine
(through ``RunEventRepository``) and documented and served by the API (``StreamRunEvents``
decodes each row with ``served_event`` and sends the whole struct). Every field is always sent
(the schema marks them required): a row written before a field existed gets its default when
it is served.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

# The vocabularies are spelled once, in app/domain/states.py (RunErrorCode: the codes of
# app/worker/errors.py; a unit test keeps the two equal).
from app.domain.states import (
    CompressionReason,
    DecisionType,
    MessageRole,
    ProviderRetryOutcome,
    RunErrorCode,
    RunEventStatus,
)


@dataclass(frozen=True, slots=True)
class RunError:
    """What a client is told about a failed or cancelled run: a stable code, a fixed message,
    and for a provider's failure its HTTP status (None: no answer) and its own error code."""

    code: RunErrorCode
    message: str
    provider_status: int | None = None
    provider_code: str | None = None


# --- interrupts: langchain's HITLRequest (HumanInTheLoopMiddleware) -----------------------------
class ActionRequest(msgspec.Struct, kw_only=True):
    """A tool call waiting for a decision: the tool's name and the arguments the model chose."""

    name: str
    args: dict[str, Any]
    description: str | None = None


class ReviewConfig(msgspec.Struct, kw_only=True):
    """The decisions ResumeRun may give for the action named ``action_name``."""

    action_name: str
    allowed_decisions: list[DecisionType]
    args_schema: dict[str, Any] | None = None


class HITLRequest(msgspec.Struct, kw_only=True):
    """The pending tool calls of an interrupted run (langchain's ``HITLRequest``): one decision
    per ``action_requests`` item, in order, answers it (ResumeRun)."""

    action_requests: list[ActionRequest]
    review_configs: list[ReviewConfig] = []


def hitl_request(value: Any) -> HITLRequest | None:
    """A stored interrupt (JSON) as the typed request it is (extra keys are dropped); None
    when it is not one (a graph's own ``interrupt(value)``, served as ``interrupt_value``)."""
    if not isinstance(value, dict) or "action_requests" not in value:
        return None
    try:
        return msgspec.convert(value, HITLRequest)
    except msgspec.ValidationError:
        return None


# --- the event payloads -------------------------------------------------------------------------
class StatusEvent(msgspec.Struct, kw_only=True):
    """The run changed status; ``final`` marks the last event of the stream."""

    type: Literal["status"]
    status: RunEventStatus
    final: bool = False
    #: A fixed, human-readable message for ``error_code``; null unless failed or cancelled.
    error: str | None = None
    error_code: RunErrorCode | None = None
    #: ``provider_error``: the HTTP status the provider answered (null: no answer, e.g. a
    #: refused connection) and its own error code (``invalid_api_key``, ``model_not_found``...,
    #: never its free text); else null.
    provider_status: int | None = None
    provider_code: str | None = None
    #: ``interrupted``: the pending tool calls awaiting a decision (ResumeRun); else null.
    interrupt: HITLRequest | None = None
    #: ``interrupted`` by a graph's own ``interrupt(value)`` (not a tool approval): the value
    #: as the graph gave it (ResumeRun answers it with ``resume``); else null.
    interrupt_value: Any = None
    #: The first ``running`` event: the request the run answers; else null.
    request_id: uuid.UUID | None = None
    #: ``running`` again without a worker: a draining worker released the run at a step
    #: boundary and another worker goes on from its last checkpoint.
    handoff: bool = False


def failed_event(error: RunError) -> StatusEvent:
    """The final ``status`` event of a run that failed with ``error``."""
    return StatusEvent(
        type="status",
        status="failed",
        final=True,
        error=error.message,
        error_code=error.code,
        provider_status=error.provider_status,
        provider_code=error.provider_code,
    )


class DeltaEvent(msgspec.Struct, kw_only=True):
    """Streamed model text (coalesced, ~5 per second); the ``message`` event names the stored
    message once it is whole."""

    type: Literal["delta"]
    #: The id of the AI message the text belongs to (several deltas share it).
    lc_id: str | None = None
    text: str
    #: The graph node whose model call streamed it (``model`` in Threadkeeper's own agents).
    node: str | None = None


class MessageAddedEvent(msgspec.Struct, kw_only=True):
    """The run stored an AI or tool message: which one, not its content. Fetch it with
    ListMessages(<the run's thread_id>, after_seq=seq-1, limit=1), or read the history later."""

    type: Literal["message"]
    message_id: uuid.UUID
    #: Its place in the thread's history (ListMessages ``seq``).
    seq: int
    role: MessageRole


class CompressionEvent(msgspec.Struct, kw_only=True):
    """The model view was compressed during the run (threshold reached or provider overflow)."""

    type: Literal["compression"]
    reason: CompressionReason
    before_tokens: int
    after_tokens: int
    offloaded: int
    summarized: bool
    #: How many results could not be offloaded (the Workdir failed), and why; else null.
    offload_failed: int | None = None
    offload_error: str | None = None
    #: Present (``turn_alone_exceeds``) when the view is still at or above the threshold after
    #: compression because the current turn alone does not fit; ``threshold`` names the limit.
    over_threshold: str | None = None
    threshold: int | None = None


class ProviderRetryEvent(msgspec.Struct, kw_only=True):
    """A model call failed with a transient provider error (a connection error or timeout, 429,
    5xx, "overloaded"): ``retrying`` after ``wait_seconds`` (the provider's ``Retry-After`` when
    it gave one, else exponential backoff with jitter), or ``gave_up`` (the per-call or per-run
    bound was reached: the next fallback model is tried, if the agent has one, else the run
    fails). A 400, 401, 404 or a context overflow is never retried."""

    type: Literal["provider_retry"]
    outcome: ProviderRetryOutcome
    #: The failed attempt: 1 for the call's first.
    attempt: int
    #: Seconds waited before the next attempt (0 when given up).
    wait_seconds: float
    #: The HTTP status the provider answered (null: no answer, e.g. a dropped connection).
    provider_status: int | None = None
    #: The provider's own error code (e.g. ``rate_limit_exceeded``), never its free text.
    provider_code: str | None = None
    #: The model called (``provider:model``).
    model: str = ""
    #: The failed attempt had already streamed text under this ``lc_id`` (``delta`` events):
    #: that text is void; the next attempt streams its own. Null when none of it was sent.
    discarded_lc_id: str | None = None


class CustomEvent(msgspec.Struct, kw_only=True):
    """What a node of the agent's graph wrote with LangGraph's ``get_stream_writer()``, as it
    wrote it (JSON); LangGraph's ``custom`` stream mode."""

    type: Literal["custom"]
    data: Any = None


#: LangGraph's stream modes a run records only when it names them (``GraphStreamEvent``).
GRAPH_STREAM_MODES = frozenset({"tasks", "checkpoints", "debug"})


class GraphStreamEvent(msgspec.Struct, kw_only=True):
    """What LangGraph itself streamed in a mode only a run that named it records (``tasks``,
    ``checkpoints``, ``debug``), as JSON; the LangGraph door passes it through."""

    type: Literal["graph"]
    mode: str
    data: Any = None


class StateEvent(msgspec.Struct, kw_only=True):
    """A step of a graph of the user's own ended (or its run started): the graph's state keys
    besides ``messages``, as they stand then (JSON), as LangGraph's ``values`` stream mode
    shows them. Only graphs served from a ``langgraph.json`` or a ``graph`` entry send it."""

    type: Literal["state"]
    values: dict[str, Any] = msgspec.field(default_factory=dict)


class UpdateEvent(msgspec.Struct, kw_only=True):
    """A node of a graph of the user's own finished: its name and the update it returned (JSON;
    messages as LangChain serializes them), as LangGraph's ``updates`` stream mode shows it.
    Only graphs served from a ``langgraph.json`` or a ``graph`` entry send it."""

    type: Literal["update"]
    node: str
    update: Any = None


#: Every event payload; each is documented as its own component schema.
RunEventData = (
    StatusEvent
    | DeltaEvent
    | MessageAddedEvent
    | CompressionEvent
    | ProviderRetryEvent
    | CustomEvent
    | GraphStreamEvent
    | StateEvent
    | UpdateEvent
)

#: The payload struct of each row ``type``.
EVENT_TYPES: dict[str, type[RunEventData]] = {
    "status": StatusEvent,
    "delta": DeltaEvent,
    "message": MessageAddedEvent,
    "compression": CompressionEvent,
    "provider_retry": ProviderRetryEvent,
    "custom": CustomEvent,
    "graph": GraphStreamEvent,
    "state": StateEvent,
    "update": UpdateEvent,
}


def event_row(event: RunEventData) -> tuple[str, dict[str, Any]]:
    """``(type, data)`` of the row that stores ``event`` (the row's type column holds ``type``)."""
    data: dict[str, Any] = msgspec.to_builtins(event)
    return str(data.pop("type")), data


def served_event(type_: str, data: dict[str, Any]) -> RunEventData:
    """A stored row as the payload a client gets: every field present (older rows lacked some:
    they get the field's default; a message row's old ``content`` copy is dropped)."""
    return msgspec.convert({**data, "type": type_}, EVENT_TYPES[type_])
