"""Every request and response shape of the HTTP API (msgspec Structs, stable for the SDK)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

#: Upper bound of integer cursors (message seq, event id): within PostgreSQL BIGINT and exact as
#: a JSON/JavaScript number (the OpenAPI document renders bounds as floats).
MAX_CURSOR = 2**53 - 1


class Strict(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Request bodies: unknown fields are a client error, not silently dropped."""


class ErrorBody(msgspec.Struct, kw_only=True):
    error: str
    detail: str = ""


# --- threads ------------------------------------------------------------------------------------
class CreateThreadIn(Strict):
    title: Annotated[str, msgspec.Meta(max_length=500)] = ""
    agent_id: Annotated[
        str, msgspec.Meta(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")
    ] = "default"


class ThreadOut(msgspec.Struct, kw_only=True):
    id: uuid.UUID
    title: str
    agent_id: str
    created_at: datetime
    updated_at: datetime


class ThreadPage(msgspec.Struct, kw_only=True):
    items: list[ThreadOut]
    #: Opaque cursor for the next (older) page; null on the last page.
    next_cursor: str | None = None


class MessageOut(msgspec.Struct, kw_only=True):
    id: uuid.UUID
    seq: int
    role: str
    content: str
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    run_id: uuid.UUID | None = None
    #: User messages: the request they queued; the run with this ``request_id`` answers them.
    request_id: uuid.UUID | None = None
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


class ServerSentEventOut(msgspec.Struct, kw_only=True):
    """One event of ``StreamRunEvents`` as framed on the wire; ``data`` holds a JSON document."""

    event: str
    data: str
    id: str | None = None


# --- runs ---------------------------------------------------------------------------------------
class RunOut(msgspec.Struct, kw_only=True):
    id: uuid.UUID
    thread_id: uuid.UUID
    request_id: uuid.UUID
    status: str
    #: A fixed, human-readable message for ``error_code`` (never the provider's or driver's text).
    error: str | None = None
    #: ``provider_error`` | ``context_overflow`` | ``database_unavailable`` | ``tool_error`` |
    #: ``internal_error`` | ``lease_expired`` | ``worker_stopped`` | ``cancelled``; null unless
    #: the run failed or was cancelled.
    error_code: str | None = None
    interrupt: dict[str, Any] | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None


class RunList(msgspec.Struct, kw_only=True):
    items: list[RunOut]


class Decision(Strict):
    """One answer per pending tool call, in the order the interrupt listed them.

    ``respond`` skips the tool and returns ``message`` to the model as the tool's result.
    """

    type: Literal["approve", "reject", "edit", "respond"]
    #: ``reject``: the reason given to the model; ``respond``: the tool result (required).
    message: str | None = None
    #: For ``edit``: the replacement arguments of the tool call.
    args: dict[str, Any] | None = None


class ResumeIn(Strict):
    decisions: Annotated[list[Decision], msgspec.Meta(min_length=1, max_length=50)]


# --- agent state & compression -----------------------------------------------------------------
class StateMessage(msgspec.Struct, kw_only=True):
    id: str | None
    type: str
    content: str
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    #: For offloaded tool results: workdir path, sha256 and size of the full original.
    offload: dict[str, Any] | None = None
    is_summary: bool = False


class SummaryInfo(msgspec.Struct, kw_only=True):
    present: bool
    summarized_messages: int = 0
    text: str | None = None


class ContextInfo(msgspec.Struct, kw_only=True):
    input_tokens: int
    summary_threshold: int
    pressure: float
    compression_suggested: bool


class ManualCompression(msgspec.Struct, kw_only=True):
    available: bool
    reason: str | None = None


class Capabilities(msgspec.Struct, kw_only=True):
    manual_compression: ManualCompression


class AgentStateOut(msgspec.Struct, kw_only=True):
    thread_id: uuid.UUID
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


class HealthOut(msgspec.Struct, kw_only=True):
    status: str
    detail: str = ""
