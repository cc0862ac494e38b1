"""Runs: list, read, cancel, resume, and the SSE event stream."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncGenerator
from typing import Annotated

from litestar import Controller, Request, get, post
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Parameter
from litestar.response import ServerSentEvent, ServerSentEventMessage
from litestar.status_codes import HTTP_200_OK

from app.api.errors import errors
from app.api.schemas import MAX_CURSOR, ResumeIn, RunList, RunOut, ServerSentEventOut
from app.db.models import AgentRun, RunStatus
from app.services.errors import ValidationFailed
from app.services.runs import ReviewDecision, RunService

TERMINAL = {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED}
#: Fallback poll when no notification arrives (lost NOTIFY, listener reconnecting).
POLL_SECONDS = 1.0
KEEPALIVE_SECONDS = 15.0
#: An event id as we send it: ASCII digits only (MAX_CURSOR has 16 digits).
_EVENT_ID = re.compile(r"[0-9]{1,16}")


def resume_cursor(last_event_id: str | None, after: int) -> int:
    """Where a stream resumes: the ``Last-Event-ID`` header wins over ``after``.

    Anything but an id we could have sent (non-ASCII digits such as ``\xb2``, a sign, thousands
    of digits) is a client error, not something for ``int()`` to choke on.
    """
    if not last_event_id:
        return after
    if not _EVENT_ID.fullmatch(last_event_id) or int(last_event_id) > MAX_CURSOR:
        raise ValidationFailed(
            f"Last-Event-ID must be an event id: ASCII digits, at most {MAX_CURSOR}"
        )
    return int(last_event_id)


def run_out(r: AgentRun) -> RunOut:
    return RunOut(
        id=r.id,
        thread_id=r.conversation_id,
        request_id=r.request_id,
        status=r.status.value,
        error=r.error,
        error_code=r.error_code,
        interrupt=r.interrupt,
        input_tokens=r.input_tokens,
        output_tokens=r.output_tokens,
        model_calls=r.model_calls,
        created_at=r.created_at,
        started_at=r.started_at,
        finished_at=r.finished_at,
    )


class ThreadRunsController(Controller):
    path = "/v1/threads"
    tags = ["runs"]

    @get("/{thread_id:uuid}/runs", operation_id="ListRuns", responses=errors(401, 404))
    async def list_runs(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        run_service: NamedDependency[RunService],
        limit: Annotated[int, Parameter(ge=1, le=200)] = 50,
    ) -> RunList:
        rows = await run_service.list(thread_id, principal, limit=limit)
        return RunList(items=[run_out(r) for r in rows])


class RunController(Controller):
    path = "/v1/runs"
    tags = ["runs"]

    @get("/{run_id:uuid}", operation_id="GetRun", responses=errors(401, 404))
    async def get_run(
        self,
        run_id: uuid.UUID,
        principal: NamedDependency[str],
        run_service: NamedDependency[RunService],
    ) -> RunOut:
        return run_out(await run_service.get(run_id, principal))

    @post(
        "/{run_id:uuid}/cancel",
        operation_id="CancelRun",
        status_code=HTTP_200_OK,
        responses=errors(401, 404, 409),
    )
    async def cancel_run(
        self,
        run_id: uuid.UUID,
        principal: NamedDependency[str],
        run_service: NamedDependency[RunService],
    ) -> RunOut:
        return run_out(await run_service.cancel(run_id, principal))

    @post(
        "/{run_id:uuid}/resume",
        operation_id="ResumeRun",
        status_code=HTTP_200_OK,
        responses=errors(400, 401, 404, 409, 422),
        description=(
            "Answer an interrupted run, one decision per pending tool call: approve, reject "
            "(optional message), edit (args, checked against the tool's schema: 422 "
            "validation_error), or respond (message returned as the tool's result; the tool "
            "does not run). A decision the interrupt does not allow is 400."
        ),
    )
    async def resume_run(
        self,
        run_id: uuid.UUID,
        data: ResumeIn,
        principal: NamedDependency[str],
        run_service: NamedDependency[RunService],
    ) -> RunOut:
        decisions = [
            ReviewDecision(type=d.type, message=d.message, args=d.args) for d in data.decisions
        ]
        return run_out(await run_service.resume(run_id, principal, decisions))

    @get(
        "/{run_id:uuid}/events",
        operation_id="StreamRunEvents",
        responses={
            **errors(400, 401, 404),
            200: ResponseSpec(
                data_container=ServerSentEventOut,
                media_type="text/event-stream",
                description="The run's events as server-sent events, ending after the final one.",
            ),
        },
        description=(
            "Server-sent events: `status` (running/interrupted/resumed/completed/failed/"
            "cancelled; `final` marks the end), `message` (persisted AI/tool messages), "
            "`compression`. Resumable with Last-Event-ID or `after`."
        ),
    )
    async def stream_run_events(
        self,
        request: Request,  # type: ignore[type-arg]
        run_id: uuid.UUID,
        principal: NamedDependency[str],
        run_service: NamedDependency[RunService],
        after: Annotated[int, Parameter(ge=0, le=MAX_CURSOR)] = 0,
    ) -> ServerSentEvent:
        start = resume_cursor(request.headers.get("last-event-id"), after)
        # Fail fast with 404 before the stream starts (a stream cannot change its status later).
        await run_service.events_after(run_id, principal, start)
        return ServerSentEvent(_event_feed(run_service, run_id, principal, start))


async def _event_feed(
    run_service: RunService,
    run_id: uuid.UUID,
    principal: str,
    after: int,
) -> AsyncGenerator[ServerSentEventMessage, None]:
    """Read the persisted events after ``after``; sleep until NOTIFY (or a fallback poll) says
    there are more; end after the final status. Works across processes."""
    cursor = after
    idle = 0.0
    async with run_service.event_signal(run_id) as wait:
        while True:
            events, status = await run_service.events_after(run_id, principal, cursor)
            for e in events:
                cursor = e.id
                yield ServerSentEventMessage(data=json.dumps(e.data), event=e.type, id=str(e.id))
                if e.type == "status" and e.data.get("final"):
                    return
            if events:
                idle = 0.0
                continue
            if status in TERMINAL:
                return  # drained and finished (its final event was before ``after``)
            if idle >= KEEPALIVE_SECONDS:  # keep proxies from closing an idle stream
                idle = 0.0
                yield ServerSentEventMessage(comment="keep-alive")
            idle += 0.0 if await wait(POLL_SECONDS) else POLL_SECONDS
