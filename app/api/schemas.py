"""Every request and response shape of the HTTP API (msgspec Structs, stable for the SDK)."""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

# The run-event payloads and the interrupt they carry are stored as they are served: their one
# home is the db layer.
from app.db.run_events import HITLRequest
from app.domain.states import (
    DecisionType,
    MessageRole,
    RequestStatusName,
    RunErrorCode,
    RunStatusName,
    StateMessageType,
    ThreadStatus,
)

#: Upper bound of integer cursors (message seq, event id): within PostgreSQL BIGINT and exact as
#: a JSON/JavaScript number (the OpenAPI document renders bounds as floats).
MAX_CURSOR = 2**53 - 1


class Strict(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Request bodies: unknown fields are a client error, not silently dropped."""


class ErrorCode(enum.StrEnum):
    """Every ``error`` value the API answers with (tests/unit/test_error_codes.py keeps it complete:
    an enum a client generated must never meet a value it does not know)."""

    VALIDATION_ERROR = "validation_error"
    UNAUTHORIZED = "unauthorized"
    #: A bearer credential was sent and refused (unknown key, or an invalid/expired token).
    INVALID_TOKEN = "invalid_token"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    CONFLICT = "conflict"
    THREAD_BUSY = "thread_busy"
    INVALID_STATE = "invalid_state"
    REQUEST_NOT_QUEUED = "request_not_queued"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    REQUEST_HEADER_TOO_LARGE = "request_header_too_large"
    REQUEST_TIMEOUT = "request_timeout"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    #: A malformed request on the LangGraph door (422, as LangGraph's server answers it).
    UNPROCESSABLE = "unprocessable"
    NOTHING_TO_COMPRESS = "nothing_to_compress"
    #: CompressContext on a thread whose agent lacks the ``manual_compression`` capability; a
    #: LangGraph run naming a feature Threadkeeper does not do (``fields`` names it).
    NOT_SUPPORTED = "not_supported"
    #: A LangGraph run's ``webhook`` is not http(s), or names a loopback, link-local or private
    #: address (``THREADKEEPER_WEBHOOK_ALLOW_PRIVATE``).
    WEBHOOK_REFUSED = "webhook_refused"
    #: A part of LangGraph's API Threadkeeper does not serve (501).
    NOT_IMPLEMENTED = "not_implemented"
    #: CreateThread named an agent that is not registered (ListAgents lists them).
    UNKNOWN_AGENT = "unknown_agent"
    #: The thread's agent is no longer registered or could not start (GetAgent says why).
    AGENT_UNAVAILABLE = "agent_unavailable"
    #: A run named another agent (assistant) than the one its thread is fixed to.
    AGENT_MISMATCH = "agent_mismatch"
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    #: A checkpoint the thread does not have (unknown, pruned, or another thread's).
    CHECKPOINT_NOT_FOUND = "checkpoint_not_found"
    #: A run may fork a thread only from a turn boundary (before a run's input, its input
    #: applied, or a run's end).
    CHECKPOINT_NOT_FORKABLE = "checkpoint_not_forkable"
    #: ResumeRun: edited tool arguments do not fit the tool's argument schema (422).
    INVALID_TOOL_ARGUMENTS = "invalid_tool_arguments"
    RATE_LIMITED = "rate_limited"
    TOO_MANY_STREAMS = "too_many_streams"
    INTERNAL_ERROR = "internal_error"
    COMPRESSION_FAILED = "compression_failed"
    UNAVAILABLE = "unavailable"
    DATABASE_UNAVAILABLE = "database_unavailable"
    DATABASE_NOT_MIGRATED = "database_not_migrated"
    STREAMS_UNAVAILABLE = "streams_unavailable"
    #: A token's signing key cannot be fetched from the identity provider right now.
    IDENTITY_PROVIDER_UNAVAILABLE = "identity_provider_unavailable"
    WORKDIR_UNAVAILABLE = "workdir_unavailable"
    HTTP_ERROR = "http_error"


class FieldError(msgspec.Struct, kw_only=True):
    """One failing input: ``field`` is a dotted path into the body (``decisions.0.type``) or the
    name of a query parameter / header; ``message`` says what was expected."""

    field: str
    message: str


class ErrorBody(msgspec.Struct, kw_only=True):
    """Every 4xx/5xx body: a stable ``error`` code, a human-readable ``detail``."""

    error: ErrorCode
    detail: str = ""
    #: ``validation_error`` only: every failing field (absent when none can be named).
    fields: list[FieldError] | None = None


#: Thread metadata: a JSON object of at most 64 keys, each 1-100 characters, and (checked by the
#: service, since msgspec cannot bound a nested document) at most METADATA_MAX_BYTES as JSON.
MetadataKey = Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
Metadata = Annotated[dict[MetadataKey, Any], msgspec.Meta(max_length=64)]


# --- threads ------------------------------------------------------------------------------------
Title = Annotated[str, msgspec.Meta(max_length=500)]


class CreateThreadIn(Strict):
    title: Title = ""
    #: A registered agent (ListAgents); unknown: 422 ``unknown_agent``. Left out: the default
    #: agent (``default``, else the first of the agents file).
    agent_id: (
        Annotated[str, msgspec.Meta(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")]
        | None
    ) = None
    metadata: Metadata = msgspec.field(default_factory=dict)


class UpdateThreadIn(Strict):
    """UpdateThread: a field left out keeps its value; ``metadata`` replaces the whole object."""

    title: Title | msgspec.UnsetType = msgspec.UNSET
    metadata: Metadata | msgspec.UnsetType = msgspec.UNSET


class ThreadOut(msgspec.Struct, kw_only=True):
    id: uuid.UUID
    title: str
    agent_id: str
    status: ThreadStatus
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime


class ThreadPage(msgspec.Struct, kw_only=True):
    items: list[ThreadOut]
    #: Opaque cursor for the next (older) page; null on the last page.
    next_cursor: str | None = None


class ToolCall(msgspec.Struct, kw_only=True):
    """A tool call of an AI message: its id (null when the provider gave none), tool, arguments."""

    id: str | None
    name: str
    args: dict[str, Any]


class MessageOut(msgspec.Struct, kw_only=True):
    id: uuid.UUID
    seq: int
    role: MessageRole
    content: str
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    run_id: uuid.UUID | None = None
    #: User messages: the request they queued; the run with this ``request_id`` answers them.
    request_id: uuid.UUID | None = None
    #: A user message whose request was cancelled (CancelRequest) before any run took it: it
    #: stays in the full history but never reached the model.
    withdrawn: bool = False
    created_at: datetime


class MessagePage(msgspec.Struct, kw_only=True):
    items: list[MessageOut]
    next_after_seq: int | None = None


class PostMessageIn(Strict):
    content: Annotated[str, msgspec.Meta(min_length=1, max_length=200_000)]


class PostMessageOut(msgspec.Struct, kw_only=True):
    request_id: uuid.UUID
    message_id: uuid.UUID
    status: Literal["queued"] = "queued"
    #: The run that waited for approval and this message superseded (cancelled, error code
    #: ``superseded``); null when none did.
    superseded_run_id: uuid.UUID | None = None


# --- run requests -------------------------------------------------------------------------------


class RequestOut(msgspec.Struct, kw_only=True):
    """A posted message's place in the thread's queue and, once dispatched, the run answering it."""

    id: uuid.UUID
    thread_id: uuid.UUID
    message_id: uuid.UUID
    status: RequestStatusName
    run_id: uuid.UUID | None = None
    run_status: RunStatusName | None = None
    created_at: datetime


# --- run events (StreamRunEvents) --------------------------------------------------------------
# Each SSE frame is ``event: <type>``, ``id: <n>`` and ``data: <one payload as JSON>``; the JSON
# repeats the event name as ``type`` (the discriminator of the ``RunEvent`` union the document
# declares as the stream's item schema, app/api/openapi.py). The payload structs live in
# app/db/run_events.py.


# --- runs ---------------------------------------------------------------------------------------
class RunOut(msgspec.Struct, kw_only=True):
    id: uuid.UUID
    thread_id: uuid.UUID
    request_id: uuid.UUID
    status: RunStatusName
    #: A fixed, human-readable message for ``error_code`` (never the provider's or driver's text).
    error: str | None = None
    #: ``provider_error`` | ``context_overflow`` | ``database_unavailable`` | ``tool_error`` |
    #: ``internal_error`` | ``lease_expired`` | ``worker_stopped`` | ``cancelled``; null unless
    #: the run failed or was cancelled.
    error_code: RunErrorCode | None = None
    #: ``provider_error``: the HTTP status the model provider answered (401: a wrong key, 404: a
    #: wrong model or base URL...), null when it could not be reached (refused, dropped, timed
    #: out); else null.
    provider_status: int | None = None
    #: ``provider_error``: the provider's own error code (``invalid_api_key``,
    #: ``model_not_found``, ``rate_limit_exceeded``...), never its free text; null when it gave
    #: none.
    provider_code: str | None = None
    #: ``interrupted``: the pending tool calls awaiting a decision (ResumeRun); else null.
    interrupt: HITLRequest | None = None
    #: ``interrupted`` by a graph's own ``interrupt(value)``: that value (ResumeRun answers it
    #: with ``resume``); else null.
    interrupt_value: Any = None
    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None


class RunList(msgspec.Struct, kw_only=True):
    items: list[RunOut]


class EditedAction(Strict):
    args: dict[str, Any]
    name: str | None = None


class Decision(Strict):
    """One answer per pending tool call, in the order the interrupt listed them.

    ``respond`` skips the tool and returns ``message`` to the model as the tool's result.
    """

    type: DecisionType
    #: ``reject``: the reason given to the model; ``respond``: the tool result (required).
    message: str | None = None
    #: For ``edit``: the tool call with its replacement arguments, as LangGraph's API takes it
    #: (``name``, if given, must be the pending call's tool).
    edited_action: EditedAction | None = None
    #: For ``edit``: the replacement arguments (the older spelling of ``edited_action.args``).
    args: dict[str, Any] | None = None


class ResumeIn(Strict):
    """``decisions`` answer pending tool calls (an ``interrupt``); ``resume`` answers a graph's
    own ``interrupt(value)`` (an ``interrupt_value``): what ``interrupt()`` returns in the graph."""

    decisions: Annotated[list[Decision], msgspec.Meta(min_length=1, max_length=50)] | None = None
    resume: Any = None


# --- agent state & compression -----------------------------------------------------------------
class Offload(msgspec.Struct, kw_only=True):
    """Where the full original of an offloaded tool result is: its Workdir ``path`` (ReadWorkdir),
    ``sha256`` of its UTF-8 bytes, its size in ``chars`` and ``bytes``, and the tokens it took
    in the model view before it was replaced by a preview."""

    path: str
    sha256: str
    chars: int
    bytes: int
    original_tokens: int


class StateMessage(msgspec.Struct, kw_only=True):
    id: str | None
    type: StateMessageType
    content: str
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    #: For offloaded tool results: where the full original is; else null.
    offload: Offload | None = None
    is_summary: bool = False


class SummaryInfo(msgspec.Struct, kw_only=True):
    present: bool
    summarized_messages: int = 0
    text: str | None = None


class ContextInfo(msgspec.Struct, kw_only=True):
    input_tokens: int
    summary_threshold: int
    #: ``input_tokens / summary_threshold``; null when the next request cannot be counted
    #: (``pressure_reason`` says why: a graph of the user's own that does not call its model
    #: through Threadkeeper's compression).
    pressure: float | None
    compression_suggested: bool
    pressure_reason: str | None = None


class ManualCompression(msgspec.Struct, kw_only=True):
    #: True exactly when CompressContext would change the view now (one shared predicate).
    available: bool
    #: Why not: ``not_supported`` (the agent lacks the capability) | ``agent_unavailable`` |
    #: ``thread_busy`` | ``empty_history`` | ``nothing_to_compress`` (nothing large to offload
    #: and no history older than the kept recent part); null when available.
    reason: str | None = None
    #: Why, in words, when ``reason`` is ``agent_unavailable``.
    detail: str | None = None


class Capabilities(msgspec.Struct, kw_only=True):
    manual_compression: ManualCompression


class AgentStateOut(msgspec.Struct, kw_only=True):
    thread_id: uuid.UUID
    #: The thread's agent (its budget: ``context.summary_threshold``; more: GetAgent).
    agent_id: str
    messages: list[StateMessage]
    summary: SummaryInfo
    context: ContextInfo
    capabilities: Capabilities
    next: list[str]


class CompressOut(msgspec.Struct, kw_only=True):
    before_tokens: int
    after_tokens: int
    offloaded: int
    summarized: bool


# --- knowledge base -----------------------------------------------------------------------------
class AddDocumentIn(Strict):
    title: Annotated[str, msgspec.Meta(min_length=1, max_length=500)]
    content: Annotated[str, msgspec.Meta(min_length=1, max_length=500_000)]
    source: Annotated[str, msgspec.Meta(max_length=500)] = ""
    url: Annotated[str, msgspec.Meta(max_length=2000)] = ""
    chunk_chars: Annotated[int, msgspec.Meta(ge=200, le=20_000)] = 1200


class DocumentOut(msgspec.Struct, kw_only=True):
    id: uuid.UUID
    kb: str
    title: str
    chunks: int


class DocumentInfo(msgspec.Struct, kw_only=True):
    id: uuid.UUID
    kb: str
    title: str
    source: str
    url: str
    chunks: int
    created_at: datetime


class DocumentPage(msgspec.Struct, kw_only=True):
    items: list[DocumentInfo]
    #: Opaque cursor for the next (older) page; null on the last page.
    next_cursor: str | None = None


class KbResult(msgspec.Struct, kw_only=True):
    id: str
    doc_id: str
    source: str
    title: str
    url: str
    score: float
    content: str


class KbSearchOut(msgspec.Struct, kw_only=True):
    query: str
    count: int
    results: list[KbResult]


class StreamTokenOut(msgspec.Struct, kw_only=True):
    #: Pass as ``?stream_token=`` to StreamRunEvents of this run (and nothing else).
    token: str
    run_id: uuid.UUID
    #: After this the token starts no stream (an open stream goes on).
    expires_at: datetime


#: What /health and /ready answer.
HealthStatus = Literal["ok", "ready", "starting", "unavailable", "migrating"]


class HealthOut(msgspec.Struct, kw_only=True):
    status: HealthStatus
    detail: str = ""


# --- agents -------------------------------------------------------------------------------------
class AgentBudget(msgspec.Struct, kw_only=True):
    """The agent's compression budget (tokens; the same fields as the THREADKEEPER_* ones)."""

    summary_threshold: int
    tool_result_preview_tokens: int
    summary_keep_recent_tokens: int
    summary_max_tokens: int
    summary_timeout_seconds: float


class AgentTool(msgspec.Struct, kw_only=True):
    name: str
    description: str
    #: JSON Schema of the tool's arguments, as the model sees it.
    parameters: dict[str, Any]
    #: The run waits for a human decision (ResumeRun) before this tool runs.
    needs_approval: bool


class AgentOut(msgspec.Struct, kw_only=True):
    id: str
    name: str
    description: str
    #: ``provider:model`` or ``offline`` (no base URL, no key).
    model: str
    summarizer: str
    #: The knowledge base ``query_kb`` searches.
    knowledge_base: str
    #: e.g. ``manual_compression``.
    capabilities: list[str]
    budget: AgentBudget
    recursion_limit: int
    tools: list[AgentTool]
    #: False when the agent could not start (e.g. its MCP server did not answer): its threads'
    #: runs fail with ``agent_unavailable``; ``unavailable_reason`` says why.
    available: bool
    unavailable_reason: str | None = None


class AgentList(msgspec.Struct, kw_only=True):
    items: list[AgentOut]
    #: The agent CreateThread gives a thread that names none.
    default_agent_id: str
