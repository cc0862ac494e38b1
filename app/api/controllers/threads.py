"""Threads: create, list, read, delete; post a message; read the persisted history."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, delete, get, patch, post
from litestar.di import NamedDependency
from litestar.params import HeaderParameter, Parameter
from litestar.status_codes import HTTP_201_CREATED, HTTP_202_ACCEPTED, HTTP_204_NO_CONTENT

from app.api.auth import principal_of
from app.api.cursors import decode_cursor, encode_cursor
from app.api.errors import errors
from app.api.json_guard import MAX_JSON_DEPTH, json_depth
from app.api.schemas import (
    MAX_CURSOR,
    CreateThreadIn,
    MessageOut,
    MessagePage,
    PostMessageIn,
    PostMessageOut,
    ThreadOut,
    ThreadPage,
    ToolCall,
    UpdateThreadIn,
)
from app.db.models import Message
from app.domain.errors import (
    AgentUnavailable,
    IdempotencyKeyReused,
    NotFound,
    ThreadBusy,
    UnknownAgent,
    ValidationFailed,
)
from app.services.intake import IntakeService
from app.services.threads import ThreadService, ThreadView


def thread_out(view: ThreadView) -> ThreadOut:
    c = view.conversation
    return ThreadOut(
        id=c.id,
        title=c.title,
        agent_id=c.agent_id,
        status=view.status,
        metadata=c.meta,
        created_at=c.created_at,
        updated_at=c.updated_at,
    )


def message_out(m: Message, *, withdrawn: bool = False) -> MessageOut:
    return MessageOut(
        id=m.id,
        seq=m.seq,
        role=m.role,
        content=m.content,
        tool_calls=msgspec.convert(m.tool_calls, list[ToolCall] | None),
        tool_call_id=m.tool_call_id,
        tool_name=m.tool_name,
        run_id=m.run_id,
        request_id=m.request_id,
        withdrawn=withdrawn,
        created_at=m.created_at,
    )


def _contains_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_contains_nul(k) or _contains_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_contains_nul(v) for v in value)
    return False


def decode_metadata_filter(raw: str) -> dict[str, Any]:
    """``?metadata={"project":"apollo"}``: a JSON object the thread's metadata must contain.

    Decoded as strictly as a request body (the depth guard, then msgspec): Python's ``json``
    accepts ``NaN``, ``Infinity``, ``1e400`` and lone surrogate escapes, which JSONB refuses
    (a 500), and recurses until ``RecursionError`` on deep nesting.
    """
    invalid = ValidationFailed("metadata must be a JSON object", field="metadata")
    try:
        data = raw.encode()
    except UnicodeEncodeError as exc:  # a lone surrogate that reached us unescaped
        raise invalid from exc
    if json_depth(data) > MAX_JSON_DEPTH:
        raise ValidationFailed(
            f"metadata is nested deeper than {MAX_JSON_DEPTH} levels", field="metadata"
        )
    try:
        value = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise invalid from exc
    if not isinstance(value, dict):
        raise invalid
    if _contains_nul(value):  # JSONB cannot store U+0000, so nothing stored can contain it
        raise ValidationFailed("metadata must not contain NUL characters", field="metadata")
    return value


class ThreadController(Controller):
    path = "/v1/threads"
    tags = ["threads"]

    @post(
        "/",
        operation_id="CreateThread",
        status_code=HTTP_201_CREATED,
        responses=errors(UnknownAgent),
        description="422 unknown_agent: `agent_id` names no registered agent (ListAgents).",
    )
    async def create_thread(
        self,
        data: CreateThreadIn,
        principal: NamedDependency[str],
        thread_service: NamedDependency[ThreadService],
    ) -> ThreadOut:
        view = await thread_service.create(
            owner_id=principal, agent_id=data.agent_id, title=data.title, metadata=data.metadata
        )
        return thread_out(view)

    @get("/", operation_id="ListThreads", responses=errors())
    async def list_threads(
        self,
        principal: NamedDependency[str],
        thread_service: NamedDependency[ThreadService],
        limit: Annotated[int, Parameter(ge=1, le=200)] = 50,
        cursor: str | None = None,
        metadata: Annotated[
            str | None,
            Parameter(
                max_length=4096,
                description=(
                    'A JSON object, e.g. {"project":"apollo"}: only threads whose metadata '
                    "contains it (every key with an equal value; nested objects likewise)."
                ),
            ),
        ] = None,
    ) -> ThreadPage:
        before = decode_cursor(cursor) if cursor else None
        wanted = decode_metadata_filter(metadata) if metadata is not None else None
        rows = await thread_service.list(principal, limit=limit + 1, before=before, metadata=wanted)
        page = rows[:limit]
        last = page[-1].conversation if page else None
        next_cursor = (
            encode_cursor(last.created_at, last.id) if len(rows) > limit and last else None
        )
        return ThreadPage(items=[thread_out(v) for v in page], next_cursor=next_cursor)

    @get("/{thread_id:str}", operation_id="GetThread", responses=errors(NotFound))
    async def get_thread(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        thread_service: NamedDependency[ThreadService],
    ) -> ThreadOut:
        return thread_out(await thread_service.view(thread_id, principal))

    @patch(
        "/{thread_id:str}",
        operation_id="UpdateThread",
        responses=errors(NotFound, ThreadBusy),
        description="Change the title and/or replace the metadata; omitted fields are kept.",
    )
    async def update_thread(
        self,
        thread_id: uuid.UUID,
        data: UpdateThreadIn,
        principal: NamedDependency[str],
        thread_service: NamedDependency[ThreadService],
    ) -> ThreadOut:
        view = await thread_service.update(
            thread_id,
            principal,
            title=None if data.title is msgspec.UNSET else data.title,
            metadata=None if data.metadata is msgspec.UNSET else data.metadata,
        )
        return thread_out(view)

    @delete(
        "/{thread_id:str}",
        operation_id="DeleteThread",
        status_code=HTTP_204_NO_CONTENT,
        responses=errors(NotFound, ThreadBusy),
    )
    async def delete_thread(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        thread_service: NamedDependency[ThreadService],
    ) -> None:
        """409 ``thread_busy`` while a run is running; a run waiting for approval is deleted
        with its thread (nobody works on it)."""
        await thread_service.delete(thread_id, principal)

    @post(
        "/{thread_id:str}/messages",
        operation_id="PostMessage",
        status_code=HTTP_202_ACCEPTED,
        responses=errors(NotFound, ThreadBusy, IdempotencyKeyReused, AgentUnavailable),
        description=(
            "Queue a user message. With an `Idempotency-Key` header (per thread), a retry with "
            "the same body answers the first 202 again and writes nothing; the same key with "
            "another body is refused with 422 `idempotency_key_reused`. While the thread's "
            "agent cannot run (an MCP server it uses does not answer; it is retried), the "
            "message is refused with 409 `agent_unavailable` and `Retry-After` (the next "
            "attempt), and nothing is written. On a thread whose run waits for approval, the "
            "message supersedes it (unless the agent sets `on_input_while_interrupted = "
            '"queue"`): that run is cancelled (error code `superseded`, named in '
            "`superseded_run_id`), its pending tool calls are answered as not run, and the "
            "message runs next."
        ),
    )
    async def post_message(
        self,
        thread_id: uuid.UUID,
        data: PostMessageIn,
        request: Request[Any, Any, Any],
        intake_service: NamedDependency[IntakeService],
        idempotency_key: Annotated[
            str | None,
            HeaderParameter(
                name="Idempotency-Key",
                min_length=1,
                max_length=200,
                pattern=r"^[\x21-\x7e]+$",
                description="Any printable ASCII token the client picks per logical message.",
            ),
        ] = None,
    ) -> PostMessageOut:
        if not data.content.strip():
            raise ValidationFailed("content must not be blank", field="content")
        accepted = await intake_service.post_message(  # the hot path: one dependency only
            thread_id, principal_of(request), data.content, idempotency_key=idempotency_key
        )
        return PostMessageOut(
            request_id=accepted.request_id,
            message_id=accepted.message_id,
            superseded_run_id=accepted.superseded_run_id,
        )

    @get("/{thread_id:str}/messages", operation_id="ListMessages", responses=errors(NotFound))
    async def list_messages(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        thread_service: NamedDependency[ThreadService],
        after_seq: Annotated[int, Parameter(ge=0, le=MAX_CURSOR)] = 0,
        limit: Annotated[int, Parameter(ge=1, le=1000)] = 200,
        branch_id: Annotated[
            uuid.UUID | None,
            Parameter(
                description="The branch to read (ListBranches; the thread's id is its first "
                "branch). Default: the current one."
            ),
        ] = None,
    ) -> MessagePage:
        history = await thread_service.messages(
            thread_id, principal, after_seq=after_seq, limit=limit + 1, branch_id=branch_id
        )
        rows, withdrawn = history.messages, history.withdrawn_requests
        page = list(rows[:limit])
        nxt = page[-1].seq if len(rows) > limit and page else None
        items = [message_out(m, withdrawn=m.request_id in withdrawn) for m in page]
        return MessagePage(items=items, next_after_seq=nxt)
