"""Threads: create, list, read, delete; post a message; read the persisted history."""

from __future__ import annotations

import base64
import uuid
from datetime import datetime
from typing import Annotated

from litestar import Controller, delete, get, post
from litestar.di import NamedDependency
from litestar.params import Parameter
from litestar.status_codes import HTTP_201_CREATED, HTTP_202_ACCEPTED, HTTP_204_NO_CONTENT

from app.api.errors import errors
from app.api.schemas import (
    MAX_CURSOR,
    CreateThreadIn,
    MessageOut,
    MessagePage,
    PostMessageIn,
    PostMessageOut,
    ThreadOut,
    ThreadPage,
)
from app.db.models import Conversation, Message
from app.services.errors import ValidationFailed
from app.services.intake import IntakeService
from app.services.threads import ThreadService


def thread_out(c: Conversation) -> ThreadOut:
    return ThreadOut(
        id=c.id,
        title=c.title,
        agent_id=c.agent_id,
        created_at=c.created_at,
        updated_at=c.updated_at,
    )


def message_out(m: Message) -> MessageOut:
    return MessageOut(
        id=m.id,
        seq=m.seq,
        role=m.role,
        content=m.content,
        tool_calls=m.tool_calls,
        tool_call_id=m.tool_call_id,
        tool_name=m.tool_name,
        run_id=m.run_id,
        request_id=m.request_id,
        created_at=m.created_at,
    )


def encode_cursor(c: Conversation) -> str:
    raw = f"{c.created_at.isoformat()}|{c.id}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        created, _, cid = base64.urlsafe_b64decode(padded.encode()).decode().partition("|")
        return datetime.fromisoformat(created), uuid.UUID(cid)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationFailed("invalid cursor") from exc


class ThreadController(Controller):
    path = "/v1/threads"
    tags = ["threads"]

    @post(
        "/", operation_id="CreateThread", status_code=HTTP_201_CREATED, responses=errors(400, 401)
    )
    async def create_thread(
        self,
        data: CreateThreadIn,
        principal: NamedDependency[str],
        thread_service: NamedDependency[ThreadService],
    ) -> ThreadOut:
        conv = await thread_service.create(
            owner_id=principal, agent_id=data.agent_id, title=data.title
        )
        return thread_out(conv)

    @get("/", operation_id="ListThreads", responses=errors(400, 401))
    async def list_threads(
        self,
        principal: NamedDependency[str],
        thread_service: NamedDependency[ThreadService],
        limit: Annotated[int, Parameter(ge=1, le=200)] = 50,
        cursor: str | None = None,
    ) -> ThreadPage:
        before = decode_cursor(cursor) if cursor else None
        rows = await thread_service.list(principal, limit=limit + 1, before=before)
        page = list(rows[:limit])
        next_cursor = encode_cursor(page[-1]) if len(rows) > limit and page else None
        return ThreadPage(items=[thread_out(c) for c in page], next_cursor=next_cursor)

    @get("/{thread_id:uuid}", operation_id="GetThread", responses=errors(401, 404))
    async def get_thread(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        thread_service: NamedDependency[ThreadService],
    ) -> ThreadOut:
        return thread_out(await thread_service.get(thread_id, principal))

    @delete(
        "/{thread_id:uuid}",
        operation_id="DeleteThread",
        status_code=HTTP_204_NO_CONTENT,
        responses=errors(401, 404, 409),
    )
    async def delete_thread(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        thread_service: NamedDependency[ThreadService],
    ) -> None:
        await thread_service.delete(thread_id, principal)

    @post(
        "/{thread_id:uuid}/messages",
        operation_id="PostMessage",
        status_code=HTTP_202_ACCEPTED,
        responses=errors(400, 401, 404, 409, 413),
    )
    async def post_message(
        self,
        thread_id: uuid.UUID,
        data: PostMessageIn,
        principal: NamedDependency[str],
        intake_service: NamedDependency[IntakeService],
    ) -> PostMessageOut:
        if not data.content.strip():
            raise ValidationFailed("content must not be blank")
        accepted = await intake_service.post_message(thread_id, principal, data.content)
        return PostMessageOut(request_id=accepted.request_id, message_id=accepted.message_id)

    @get("/{thread_id:uuid}/messages", operation_id="ListMessages", responses=errors(400, 401, 404))
    async def list_messages(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        thread_service: NamedDependency[ThreadService],
        after_seq: Annotated[int, Parameter(ge=0, le=MAX_CURSOR)] = 0,
        limit: Annotated[int, Parameter(ge=1, le=1000)] = 200,
    ) -> MessagePage:
        rows = await thread_service.messages(
            thread_id, principal, after_seq=after_seq, limit=limit + 1
        )
        page = list(rows[:limit])
        nxt = page[-1].seq if len(rows) > limit and page else None
        return MessagePage(items=[message_out(m) for m in page], next_after_seq=nxt)
