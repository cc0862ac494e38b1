"""LangGraph threads, thread state/history, and Threadkeeper's compression under the thread."""

from __future__ import annotations

import uuid
from typing import Annotated

from litestar import Controller, delete, get, patch, post
from litestar.di import NamedDependency
from litestar.params import Parameter
from litestar.status_codes import HTTP_200_OK, HTTP_204_NO_CONTENT

from app.api.error_declarations import errors
from app.api.langgraph.presenters import compress_out, state_out, thread_out
from app.api.langgraph.responses import CompressOut, ThreadOut, ThreadStateOut
from app.api.langgraph.schemas import (
    CheckpointIn,
    HistoryIn,
    StateAtIn,
    ThreadCountIn,
    ThreadCreateIn,
    ThreadPatchIn,
    ThreadSearchIn,
)
from app.domain.errors import (
    AgentMismatch,
    AlreadyExists,
    CheckpointNotFound,
    NotFound,
    NothingToCompress,
    NotImplementedHere,
    NotSupported,
    ThreadBusy,
    UnknownAgent,
    WorkdirUnavailable,
)
from app.services.context_compression import ContextCompressionService
from app.services.langgraph.threads import LangGraphThreadService, ThreadSearch


class LangGraphThreadController(Controller):
    path = "/threads"
    tags = ["threads"]

    @post(
        "/",
        operation_id="CreateThread",
        status_code=HTTP_200_OK,
        responses=errors(AlreadyExists, UnknownAgent, "unprocessable"),
    )
    async def create(
        self,
        data: ThreadCreateIn,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
    ) -> ThreadOut:
        """``metadata.graph_id`` (or ``assistant_id``) chooses the thread's agent; without it
        the first run does. Either way it is then fixed."""
        record = await lg_threads.create(
            principal,
            thread_id=data.thread_id,
            metadata=dict(data.metadata or {}),
            if_exists=data.if_exists,
        )
        return thread_out(record)

    @post("/search", operation_id="SearchThreads", status_code=HTTP_200_OK)
    async def search(
        self,
        data: ThreadSearchIn,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
    ) -> list[ThreadOut]:
        """Each thread's ``values`` holds its first message (GetThread has the history)."""
        query = ThreadSearch(
            metadata=dict(data.metadata) if data.metadata else None,
            ids=data.ids,
            status=data.status,
            limit=data.limit,
            offset=data.offset,
            sort_by=data.sort_by or "created_at",
            sort_order=data.sort_order or "desc",
        )
        return [thread_out(r) for r in await lg_threads.search(principal, query)]

    @post("/count", operation_id="CountThreads", status_code=HTTP_200_OK)
    async def count(
        self,
        data: ThreadCountIn,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
    ) -> int:
        query = ThreadSearch(
            metadata=dict(data.metadata) if data.metadata else None, status=data.status
        )
        return await lg_threads.count(principal, query)

    @get("/{thread_id:uuid}", operation_id="GetThread", responses=errors(NotFound))
    async def get_thread(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
    ) -> ThreadOut:
        return thread_out(await lg_threads.get(thread_id, principal))

    @patch(
        "/{thread_id:uuid}",
        operation_id="PatchThread",
        responses=errors(NotFound, AgentMismatch, ThreadBusy, "unprocessable"),
    )
    async def patch_thread(
        self,
        thread_id: uuid.UUID,
        data: ThreadPatchIn,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
    ) -> ThreadOut:
        """Merges ``metadata``; ``graph_id`` / ``assistant_id`` naming another agent than the
        thread's is ``agent_mismatch``."""
        return thread_out(await lg_threads.patch(thread_id, principal, dict(data.metadata)))

    @delete(
        "/{thread_id:uuid}",
        operation_id="DeleteThread",
        status_code=HTTP_204_NO_CONTENT,
        responses=errors(NotFound, ThreadBusy),
    )
    async def delete_thread(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
    ) -> None:
        """A thread waiting for approval goes with its pending run; a running one is 409."""
        await lg_threads.delete(thread_id, principal)

    @get("/{thread_id:uuid}/state", operation_id="GetThreadState", responses=errors(NotFound))
    async def get_state(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
    ) -> ThreadStateOut:
        return state_out(await lg_threads.state(thread_id, principal))

    @get(
        "/{thread_id:uuid}/state/{checkpoint_id:str}",
        operation_id="GetThreadStateAt",
        responses=errors(NotFound, CheckpointNotFound),
    )
    async def get_state_at(
        self,
        thread_id: uuid.UUID,
        checkpoint_id: str,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
    ) -> ThreadStateOut:
        return state_out(await lg_threads.state_at(thread_id, principal, checkpoint_id))

    @post(
        "/{thread_id:uuid}/state/checkpoint",
        operation_id="GetThreadStateAtCheckpoint",
        status_code=HTTP_200_OK,
        responses=errors(NotFound, CheckpointNotFound),
    )
    async def get_state_at_checkpoint(
        self,
        thread_id: uuid.UUID,
        data: StateAtIn,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
    ) -> ThreadStateOut:
        """``threads.get_state(thread, checkpoint={...})``: the state at that checkpoint."""
        checkpoint_id = data.checkpoint.checkpoint_id
        if not checkpoint_id:
            return state_out(await lg_threads.state(thread_id, principal))
        return state_out(await lg_threads.state_at(thread_id, principal, checkpoint_id))

    @post(
        "/{thread_id:uuid}/state",
        operation_id="UpdateThreadState",
        status_code=HTTP_200_OK,
        responses=errors(NotFound, ThreadBusy, NotImplementedHere),
    )
    async def update_state(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
    ) -> None:
        """409 ``thread_busy`` while busy (under the row lock); otherwise 501 ``not_implemented``."""
        await lg_threads.refuse_update_state(thread_id, principal)

    @post(
        "/{thread_id:uuid}/history",
        operation_id="GetThreadHistory",
        status_code=HTTP_200_OK,
        responses=errors(NotFound),
    )
    async def history(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
        data: HistoryIn | None = None,
    ) -> list[ThreadStateOut]:
        """The states a client can branch from, newest first: every turn boundary (before a
        run's input, the input applied, the run's end) and every branch's head."""
        query = data or HistoryIn()
        before = query.before
        if isinstance(before, CheckpointIn):
            before = before.checkpoint_id
        states = await lg_threads.history(thread_id, principal, limit=query.limit, before=before)
        return [state_out(s) for s in states]

    @get(
        "/{thread_id:uuid}/history", operation_id="GetThreadHistoryGet", responses=errors(NotFound)
    )
    async def history_get(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
        limit: Annotated[int, Parameter(ge=1, le=1000)] = 10,
        before: str | None = None,
    ) -> list[ThreadStateOut]:
        states = await lg_threads.history(thread_id, principal, limit=limit, before=before)
        return [state_out(s) for s in states]

    @post(
        "/{thread_id:uuid}/context/compress",
        operation_id="CompressThreadContext",
        status_code=HTTP_200_OK,
        responses=errors(
            NotFound,
            ThreadBusy,
            NothingToCompress,
            NotSupported,
            WorkdirUnavailable,
            "compression_failed",
        ),
    )
    async def compress(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        compression_service: NamedDependency[ContextCompressionService],
    ) -> CompressOut:
        """Threadkeeper's manual compression (same rules as /v1: 409 busy, 422 nothing)."""
        return compress_out(await compression_service.compress(thread_id, principal))
