"""What a run's events hold: the typed payloads of ``run_events`` rows.

One home for them at the bottom layer because the same structs are written by the run engine
(through ``RunEventRepository``) and documented by the API (``StreamRunEvents`` serves each row
as ``{"type": <row type>, **<row data>}``); ``type`` has no default so the schema keeps it
required. ``omit_defaults``: a row stores only what is set,
which is also what a reader of the schema assumes for the rest.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

# The vocabularies are spelled once, in app/domain/states.py (RunErrorCode: the codes of
# app/worker/errors.py; a unit test keeps the two equal).
from app.domain.states import MessageRole, RunErrorCode


@dataclass(frozen=True, slots=True)
class RunError:
    """What a client is told about a failed or cancelled run: a stable code, a fixed message."""

    code: RunErrorCode
    message: str


class StatusEvent(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The run changed status; ``final`` marks the last event of the stream."""

    type: Literal["status"]
    status: Literal["running", "interrupted", "resumed", "completed", "failed", "cancelled"]
    final: bool = False
    error: str | None = None
    error_code: RunErrorCode | None = None
    #: ``interrupted``: the pending tool calls awaiting a decision (ResumeRun).
    interrupt: dict[str, Any] | list[Any] | None = None
    #: The first ``running`` event: the request the run answers.
    request_id: uuid.UUID | None = None
    #: ``running`` again without a worker: a draining worker released the run at a step
    #: boundary and another worker goes on from its last checkpoint.
    handoff: bool = False


class DeltaEvent(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Streamed model text (coalesced, ~5 per second); the ``message`` event has the whole text."""

    type: Literal["delta"]
    #: The id of the AI message the text belongs to (several deltas share it).
    lc_id: str | None = None
    text: str


class MessageEvent(msgspec.Struct, kw_only=True):
    """An AI or tool message the run persisted (the same row ListMessages returns)."""

    type: Literal["message"]
    message_id: uuid.UUID
    seq: int
    role: MessageRole
    content: str
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None


class CompressionEvent(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The model view was compressed during the run (threshold reached or provider overflow)."""

    type: Literal["compression"]
    reason: str
    before_tokens: int
    after_tokens: int
    offloaded: int
    summarized: bool
    #: Present when some results could not be offloaded (the Workdir failed): how many, and why.
    offload_failed: int | None = None
    offload_error: str | None = None
    #: Present (``turn_alone_exceeds``) when the view is still at or above the threshold after
    #: compression because the current turn alone does not fit; ``threshold`` names the limit.
    over_threshold: str | None = None
    threshold: int | None = None


#: Every event payload; each is documented as its own component schema.
RunEventData = StatusEvent | DeltaEvent | MessageEvent | CompressionEvent


def event_row(event: RunEventData) -> tuple[str, dict[str, Any]]:
    """``(type, data)`` of the row that stores ``event`` (the row's type column holds ``type``)."""
    data: dict[str, Any] = msgspec.to_builtins(event)
    return str(data.pop("type")), data
