"""LangGraph threads, thread state/history, and Threadkeeper's compression under the thread."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from litestar import Controller, delete, get, patch, post
from litestar.di import NamedDependency
from litestar.params import Parameter
from litestar.status_codes import HTTP_200_OK, HTTP_204_NO_CONTENT

from app.api.langgraph.schemas import (
    CheckpointIn,
    HistoryIn,
    StateAtIn,
    ThreadCountIn,
    ThreadCreateIn,
    ThreadPatchIn,
    ThreadSearchIn,
)
from app.services.context_compression import ContextCompressionService
from app.services.langgraph.threads import LangGraphThreadService, ThreadSearch


class LangGraphThreadController(Controller):
    path = "/threads"
    tags = ["threads"]

    @post("/", operation_id="CreateThread", status_code=HTTP_200_OK)
    async def create(
        self,
        data: ThreadCreateIn,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
    ) -> dict[str, Any]:
        return await lg_threads.create(
            principal,
            thread_id=data.thread_id,
            metadata=dict(data.metadata or {}),
            if_exists=data.if_exists,
        )

    @post("/search", operation_id="SearchThreads", status_code=HTTP_200_OK)
    async def search(
        self,
        data: ThreadSearchIn,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
    ) -> list[dict[str, Any]]:
        query = ThreadSearch(
            metadata=dict(data.metadata) if data.metadata else None,
            ids=data.ids,
            status=data.status,
            limit=data.limit,
            offset=data.offset,
            sort_by=data.sort_by or "created_at",
            sort_order=data.sort_order or "desc",
        )
        return await lg_threads.search(principal, query)

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

    @get("/{thread_id:uuid}", operation_id="GetThread")
    async def get_thread(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
    ) -> dict[str, Any]:
        return await lg_threads.get(thread_id, principal)

    @patch("/{thread_id:uuid}", operation_id="PatchThread")
    async def patch_thread(
        self,
        thread_id: uuid.UUID,
        data: ThreadPatchIn,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
    ) -> dict[str, Any]:
        return await lg_threads.patch(thread_id, principal, dict(data.metadata))

    @delete("/{thread_id:uuid}", operation_id="DeleteThread", status_code=HTTP_204_NO_CONTENT)
    async def delete_thread(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
    ) -> None:
        await lg_threads.delete(thread_id, principal)

    @get("/{thread_id:uuid}/state", operation_id="GetThreadState")
    async def get_state(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
    ) -> dict[str, Any]:
        return await lg_threads.state(thread_id, principal)

    @get("/{thread_id:uuid}/state/{checkpoint_id:str}", operation_id="GetThreadStateAt")
    async def get_state_at(
        self,
        thread_id: uuid.UUID,
        checkpoint_id: str,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
    ) -> dict[str, Any]:
        return await lg_threads.state_at(thread_id, principal, checkpoint_id)

    @post(
        "/{thread_id:uuid}/state/checkpoint",
        operation_id="GetThreadStateAtCheckpoint",
        status_code=HTTP_200_OK,
    )
    async def get_state_at_checkpoint(
        self,
        thread_id: uuid.UUID,
        data: StateAtIn,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
    ) -> dict[str, Any]:
        """``threads.get_state(thread, checkpoint={...})``: the state at that checkpoint."""
        checkpoint_id = data.checkpoint.checkpoint_id
        if not checkpoint_id:
            return await lg_threads.state(thread_id, principal)
        return await lg_threads.state_at(thread_id, principal, checkpoint_id)

    @post("/{thread_id:uuid}/state", operation_id="UpdateThreadState", status_code=HTTP_200_OK)
    async def update_state(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
    ) -> None:
        """409 ``thread_busy`` while busy (under the row lock); otherwise 501 ``not_implemented``."""
        await lg_threads.refuse_update_state(thread_id, principal)

    @post("/{thread_id:uuid}/history", operation_id="GetThreadHistory", status_code=HTTP_200_OK)
    async def history(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
        data: HistoryIn | None = None,
    ) -> list[dict[str, Any]]:
        """The states a client can branch from, newest first: every turn boundary (before a
        run's input, the input applied, the run's end) and every branch's head."""
        query = data or HistoryIn()
        before = query.before
        if isinstance(before, CheckpointIn):
            before = before.checkpoint_id
        return await lg_threads.history(thread_id, principal, limit=query.limit, before=before)

    @get("/{thread_id:uuid}/history", operation_id="GetThreadHistoryGet")
    async def history_get(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        lg_threads: NamedDependency[LangGraphThreadService],
        limit: Annotated[int, Parameter(ge=1, le=1000)] = 10,
        before: str | None = None,
    ) -> list[dict[str, Any]]:
        return await lg_threads.history(thread_id, principal, limit=limit, before=before)

    @post(
        "/{thread_id:uuid}/context/compress",
        operation_id="CompressThreadContext",
        status_code=HTTP_200_OK,
    )
    async def compress(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        compression_service: NamedDependency[ContextCompressionService],
    ) -> dict[str, Any]:
        """Threadkeeper's manual compression (same rules as /v1: 409 busy, 422 nothing)."""
        r = await compression_service.compress(thread_id, principal)
        return {
            "before_tokens": r.before_tokens,
            "after_tokens": r.after_tokens,
            "offloaded": r.offloaded,
            "summarized": r.summarized,
        }
