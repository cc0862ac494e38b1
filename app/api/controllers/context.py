"""Agent state, manual compression and the Workdir (full originals of offloaded results)."""

from __future__ import annotations

import base64
import uuid

import msgspec
from litestar import Controller, get, post
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.response import Stream
from litestar.status_codes import HTTP_200_OK

from app.api.errors import errors
from app.api.schemas import (
    AgentStateOut,
    Capabilities,
    CompressOut,
    ContextInfo,
    ManualCompression,
    StateMessage,
    SummaryInfo,
)
from app.services.agent_state import AgentStateService
from app.services.context_compression import ContextCompressionService
from app.services.workdir_files import WorkdirFileService


class ContextController(Controller):
    path = "/v1/threads"
    tags = ["context"]

    @get("/{thread_id:uuid}/agent-state", operation_id="GetAgentState", responses=errors(401, 404))
    async def get_agent_state(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        agent_state_service: NamedDependency[AgentStateService],
    ) -> AgentStateOut:
        v = await agent_state_service.view(thread_id, principal)
        return AgentStateOut(
            thread_id=v.thread_id,
            messages=msgspec.convert(v.messages, list[StateMessage]),
            summary=SummaryInfo(
                present=v.summary_present,
                summarized_messages=v.summarized_messages,
                text=v.summary_text,
            ),
            context=ContextInfo(
                input_tokens=v.input_tokens,
                summary_threshold=v.summary_threshold,
                pressure=v.pressure,
                compression_suggested=v.compression_suggested,
            ),
            capabilities=Capabilities(
                manual_compression=ManualCompression(
                    available=v.manual_available, reason=v.manual_reason
                )
            ),
            next=v.next,
        )

    @post(
        "/{thread_id:uuid}/context/compress",
        operation_id="CompressContext",
        status_code=HTTP_200_OK,
        responses=errors(401, 404, 409, 422, 502, 507),
        description=(
            "Synchronous manual compression. Allowed only when the thread has no running or "
            "interrupted run and no queued request; otherwise 409 thread_busy (never queued). "
            "507 workdir_unavailable: large tool results had to be offloaded but the Workdir "
            "could not be written; nothing was changed."
        ),
    )
    async def compress_context(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        compression_service: NamedDependency[ContextCompressionService],
    ) -> CompressOut:
        r = await compression_service.compress(thread_id, principal)
        return CompressOut(
            before_tokens=r.before_tokens,
            after_tokens=r.after_tokens,
            offloaded=r.offloaded,
            summarized=r.summarized,
        )

    @get(
        "/{thread_id:uuid}/workdir/{path:path}",
        operation_id="ReadWorkdirFile",
        responses={
            **errors(400, 401, 404),
            200: ResponseSpec(
                data_container=str,
                media_type="text/plain",
                description="The full original; `Digest` and `ETag` carry its SHA-256.",
            ),
        },
    )
    async def read_workdir_file(
        self,
        thread_id: uuid.UUID,
        path: str,
        principal: NamedDependency[str],
        workdir_file_service: NamedDependency[WorkdirFileService],
    ) -> Stream:
        f = await workdir_file_service.open(thread_id, principal, path.lstrip("/"))
        digest_b64 = base64.b64encode(bytes.fromhex(f.sha256)).decode()
        # Streamed (any backend, any size); the hash is the one stored with the object, and a
        # body that does not match it is cut short rather than completed.
        return Stream(
            f,
            media_type="text/plain",  # litestar adds "; charset=utf-8"
            headers={
                "ETag": f'"sha256-{f.sha256}"',
                "Digest": f"sha-256={digest_b64}",
                "X-Content-SHA256": f.sha256,
                "Content-Length": str(f.size),
            },
        )
