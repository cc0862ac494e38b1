"""Agent state, manual compression and the Workdir (full originals of offloaded results)."""

from __future__ import annotations

import base64
import uuid

import msgspec
from litestar import Controller, get, post
from litestar.datastructures import ResponseHeader
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
from app.domain.errors import (
    AgentUnavailable,
    CompressionFailed,
    NotFound,
    NothingToCompress,
    NotSupported,
    ThreadBusy,
    WorkdirUnavailable,
)
from app.services.agent_state import AgentStateService
from app.services.context_compression import ContextCompressionService
from app.services.workdir_files import WorkdirFileService


class ContextController(Controller):
    path = "/v1/threads"
    tags = ["context"]

    @get("/{thread_id:str}/agent-state", operation_id="GetAgentState", responses=errors(NotFound))
    async def get_agent_state(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        agent_state_service: NamedDependency[AgentStateService],
    ) -> AgentStateOut:
        v = await agent_state_service.view(thread_id, principal)
        return AgentStateOut(
            thread_id=v.thread_id,
            agent_id=v.agent_id,
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
                pressure_reason=v.pressure_reason,
            ),
            capabilities=Capabilities(
                manual_compression=ManualCompression(
                    available=v.manual_available,
                    reason=v.manual_reason,
                    detail=v.agent_unavailable,
                )
            ),
            next=v.next,
        )

    @post(
        "/{thread_id:str}/context/compress",
        operation_id="CompressContext",
        status_code=HTTP_200_OK,
        responses=errors(
            NotFound,
            ThreadBusy,
            AgentUnavailable,
            NothingToCompress,
            NotSupported,
            CompressionFailed,
            WorkdirUnavailable,
        ),
        description=(
            "Synchronous manual compression with the thread's own agent (its summarizer and "
            "budget). Allowed only when the thread has no running or "
            "interrupted run and no queued request; otherwise 409 thread_busy (never queued). "
            "422 not_supported: the agent lacks the manual_compression capability; "
            "409 agent_unavailable: the thread's agent is not registered or could not start. "
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
        "/{thread_id:str}/workdir/{path:path}",
        operation_id="ReadWorkdirFile",
        response_headers=[
            ResponseHeader(
                name="ETag",
                documentation_only=True,
                description='`"sha256-<hex>"`: the SHA-256 stored with the file',
            ),
            ResponseHeader(
                name="X-Content-SHA256",
                documentation_only=True,
                description="The file's SHA-256 (64 hex digits), verified while streaming",
            ),
            ResponseHeader(
                name="Repr-Digest",
                documentation_only=True,
                description="RFC 9530: `sha-256=:<base64 of the SHA-256>:`",
            ),
        ],
        responses={
            **errors(NotFound),
            200: ResponseSpec(
                data_container=str,
                media_type="text/plain",
                description="The full original; `ETag`, `X-Content-SHA256` and `Repr-Digest` "
                "carry its SHA-256. A body that fails the check is cut short.",
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
                "Repr-Digest": f"sha-256=:{digest_b64}:",  # RFC 9530 (Digest is obsolete)
                "X-Content-SHA256": f.sha256,
                "Content-Length": str(f.size),
            },
        )
