"""Runs: list, read, cancel, resume, and the SSE event stream."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Parameter
from litestar.response import ServerSentEvent, ServerSentEventMessage
from litestar.status_codes import HTTP_200_OK, HTTP_204_NO_CONTENT

from app.api.auth import STREAM_TOKEN_OPT, signed_in
from app.api.errors import errors
from app.api.followers import FollowerLease, Followers
from app.api.schemas import (
    MAX_CURSOR,
    ResumeIn,
    RunList,
    RunOut,
    StreamTokenOut,
)
from app.api.stream_tokens import StreamTokens
from app.db.models import AgentRun, RunEvent
from app.db.run_events import RunEventData, hitl_request, served_event
from app.domain.errors import (
    AgentUnavailable,
    InvalidState,
    InvalidToolArguments,
    NotFound,
    StreamsUnavailable,
    ThreadBusy,
    TooManyStreams,
    ValidationFailed,
)
from app.services.run_feed import TERMINAL, RunFeed
from app.services.runs import RunService, review_decision

#: Seconds of silence after which a stream sends a keep-alive comment.
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


#: Longest WaitRun long-poll (seconds): below common proxy and client read timeouts.
MAX_WAIT_SECONDS = 30.0
#: The items of StreamRunEvents' 200 body: one payload per frame (the document names the union
#: ``RunEvent``, discriminated on ``type``: app/api/openapi.py).
STREAM_ITEM: Any = RunEventData


def run_out(r: AgentRun) -> RunOut:
    return RunOut(
        id=r.id,
        thread_id=r.thread_id,
        request_id=r.request_id,
        status=r.status.value,
        error=r.error,
        error_code=r.error_code,  # type: ignore[arg-type]  # app/worker/errors.py codes == RunErrorCode
        provider_status=r.provider_status,
        provider_code=r.provider_code,
        interrupt=hitl_request(r.interrupt),
        interrupt_value=r.interrupt if hitl_request(r.interrupt) is None else None,
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

    @get("/{thread_id:str}/runs", operation_id="ListRuns", responses=errors(NotFound))
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

    @get("/{run_id:str}", operation_id="GetRun", responses=errors(NotFound))
    async def get_run(
        self,
        run_id: uuid.UUID,
        principal: NamedDependency[str],
        run_service: NamedDependency[RunService],
    ) -> RunOut:
        return run_out(await run_service.get(run_id, principal))

    @get(
        "/{run_id:str}/wait",
        operation_id="WaitRun",
        responses=errors(NotFound, TooManyStreams, StreamsUnavailable),
        description=(
            "Long-poll: answers as soon as the run is no longer `running` (interrupted, "
            "completed, failed, cancelled), or after `timeout` seconds (0-30, default 30) with "
            "its current status (earlier when the server shuts down); call again while it is "
            "`running`. Open long-polls and event streams per API key are capped: 429 "
            "`too_many_streams` with `Retry-After`."
        ),
    )
    async def wait_run(
        self,
        run_id: uuid.UUID,
        principal: NamedDependency[str],
        request: Request,  # type: ignore[type-arg]
        run_feed: NamedDependency[RunFeed],
        timeout: Annotated[float, Parameter(ge=0, le=MAX_WAIT_SECONDS)] = MAX_WAIT_SECONDS,
    ) -> RunOut:
        followers: Followers = request.app.state.followers
        with followers.hold(principal):
            return run_out(await run_feed.wait(run_id, principal, timeout, stop=followers.closing))

    @post(
        "/{run_id:str}/cancel",
        operation_id="CancelRun",
        status_code=HTTP_200_OK,
        responses=errors(NotFound, ThreadBusy, InvalidState),
    )
    async def cancel_run(
        self,
        run_id: uuid.UUID,
        principal: NamedDependency[str],
        run_service: NamedDependency[RunService],
    ) -> RunOut:
        return run_out(await run_service.cancel(run_id, principal))

    @post(
        "/{run_id:str}/resume",
        operation_id="ResumeRun",
        status_code=HTTP_200_OK,
        responses=errors(
            NotFound, ThreadBusy, InvalidState, InvalidToolArguments, AgentUnavailable
        ),
        description=(
            "Answer an interrupted run, one decision per pending tool call: approve, reject "
            "(optional message), edit (`edited_action: {name, args}` as on the LangGraph API, "
            "or `args`; the arguments are checked against the tool's schema: 422 "
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
        decisions = (
            None
            if data.decisions is None
            else [
                review_decision(
                    i,
                    d.type,
                    d.message,
                    msgspec.to_builtins(d.edited_action) if d.edited_action else None,
                    args=d.args,
                )
                for i, d in enumerate(data.decisions)
            ]
        )
        return run_out(await run_service.resume(run_id, principal, decisions, value=data.resume))

    @post(
        "/{run_id:str}/stream-token",
        operation_id="CreateStreamToken",
        status_code=HTTP_200_OK,
        responses=errors(NotFound),
        description=(
            "A short-lived token that lets a browser's native EventSource (which cannot send "
            "an Authorization header) follow this run: `new EventSource("
            "`/v1/runs/{run_id}/events?stream_token=<token>`)`. It is accepted by "
            "StreamRunEvents of this run only, starts (or resumes) a stream until `expires_at`, "
            "and never reveals the API key. After it expires, get a new one and reconnect with "
            "`after=<last event id>`."
        ),
    )
    async def create_stream_token(
        self,
        run_id: uuid.UUID,
        request: Request,  # type: ignore[type-arg]
        principal: NamedDependency[str],
        run_service: NamedDependency[RunService],
    ) -> StreamTokenOut:
        await run_service.get(run_id, principal)  # 404 for a run this principal cannot see
        tokens: StreamTokens = request.app.state.stream_tokens
        token, expires = tokens.issue(run_id, principal, signed_in=signed_in(request))
        return StreamTokenOut(
            token=token, run_id=run_id, expires_at=datetime.fromtimestamp(expires, UTC)
        )

    @get(
        "/{run_id:str}/events",
        operation_id="StreamRunEvents",
        opt={STREAM_TOKEN_OPT: True},
        security=[{"BearerAuth": []}, {"StreamToken": []}],
        responses={
            **errors(NotFound, TooManyStreams, StreamsUnavailable),
            HTTP_204_NO_CONTENT: ResponseSpec(
                data_container=None,
                description=(
                    "The run has ended and there is nothing after the given event id (a "
                    "reconnect after the final event): EventSource clients stop on 204."
                ),
            ),
            200: ResponseSpec(
                data_container=STREAM_ITEM,
                media_type="text/event-stream",
                generate_examples=False,
                description=(
                    "Server-sent events, ending after the final one. Each frame has `event: "
                    "<type>`, `id: <n>` and `data: <JSON>`; the schema is that of one frame's "
                    "`data`: a RunEvent (StatusEvent, DeltaEvent, MessageAddedEvent, "
                    "CompressionEvent or ProviderRetryEvent, told apart by `type`, which "
                    "repeats the event name). "
                    "`: keep-alive` comment lines come every 15 s of silence."
                ),
            ),
        },
        description=(
            "Server-sent events: `status` (running/interrupted/resumed/completed/failed/"
            "cancelled; `final: true` marks the last event), `delta` (streamed model text), "
            "`message` (the id and seq of an AI/tool message the run stored: read it with "
            "ListMessages), `compression` (the model view was "
            "compressed), `provider_retry` (a model call failed transiently: retrying after a "
            "wait, or given up; `discarded_lc_id` names text streamed by the failed attempt, "
            "which is void). Resumable with Last-Event-ID or `after`. The body also ends, "
            "without a final event, when the server shuts down: reconnect with Last-Event-ID. "
            "Open streams and WaitRun long-polls per API key are capped: 429 "
            "`too_many_streams`; 503 `streams_unavailable` when the server cannot take more "
            "(both before the stream starts, with `Retry-After`). A reconnect after the "
            "final event answers 204 (EventSource clients stop). Browsers' EventSource, which "
            "cannot send the API key, authenticates with `?stream_token=` from "
            "CreateStreamToken instead."
        ),
    )
    async def stream_run_events(
        self,
        request: Request,  # type: ignore[type-arg]
        run_id: uuid.UUID,
        principal: NamedDependency[str],
        run_feed: NamedDependency[RunFeed],
        after: Annotated[int, Parameter(ge=0, le=MAX_CURSOR)] = 0,
        stream_token: Annotated[  # the name is stream_tokens.QUERY_PARAMETER
            str | None,
            Parameter(
                max_length=1000,
                description=(
                    "CreateStreamToken's token, in place of the Authorization header (for "
                    "EventSource in a browser); read by the auth guard."
                ),
            ),
        ] = None,
    ) -> ServerSentEvent | Response[None]:
        start = resume_cursor(request.headers.get("last-event-id"), after)
        followers: Followers = request.app.state.followers
        # Everything that can refuse the stream happens before it starts (a stream cannot
        # change its status later): the cap (429/503), then 404 / 503 database_unavailable.
        lease = followers.admit(principal)
        try:
            events, status = await run_feed.events_after(run_id, principal, start)
        except BaseException:
            lease.release()
            raise
        if not events and status in TERMINAL:  # e.g. EventSource reconnecting after the end
            lease.release()
            return Response(None, status_code=HTTP_204_NO_CONTENT)
        feed = run_feed.follow(
            run_id, principal, start, keepalive=KEEPALIVE_SECONDS, stop=followers.closing
        )
        return ServerSentEvent(_frames(feed, lease))


async def _frames(
    feed: AsyncIterator[Sequence[RunEvent]], lease: FollowerLease
) -> AsyncGenerator[ServerSentEventMessage, None]:
    """The feed's events as SSE frames, a keep-alive comment for each quiet period; the body
    ends cleanly after the final event, or at once when the server shuts down."""
    try:
        async for events in feed:
            if not events:  # keep proxies from closing an idle stream
                # A comment line only: ``data=None``, or clients would see an empty event.
                yield ServerSentEventMessage(comment="keep-alive", data=None)
            for e in events:
                payload = msgspec.json.encode(served_event(e.type, e.data)).decode()
                yield ServerSentEventMessage(data=payload, event=e.type, id=str(e.id))
    finally:
        lease.release()
