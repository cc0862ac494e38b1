"""LangGraph runs on a thread: stream / wait / background, list, get, cancel, join, join stream."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from typing import Annotated, Any, Literal

import msgspec
from litestar import Controller, Request, Response, delete, get, post
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Parameter
from litestar.response import ServerSentEvent, ServerSentEventMessage
from litestar.status_codes import HTTP_200_OK, HTTP_202_ACCEPTED, HTTP_204_NO_CONTENT

from app.api.auth import principal_of
from app.api.controllers.runs import KEEPALIVE_SECONDS
from app.api.error_declarations import errors
from app.api.followers import FollowerLease, Followers
from app.api.langgraph.parts import (
    Cursor,
    Part,
    final_values,
    parse_last_event_id,
    stream_parts,
)
from app.api.langgraph.presenters import run_out
from app.api.langgraph.responses import RunOut, RunValuesOut, StreamPartOut
from app.api.langgraph.schemas import RunCreateIn, RunInputIn
from app.domain.errors import (
    AgentMismatch,
    AgentUnavailable,
    NotFound,
    NotImplementedHere,
    NotSupported,
    ThreadBusy,
    TooManyStreams,
    ValidationFailed,
    WebhookRefused,
)
from app.services.langgraph.runs import LangGraphRun, LangGraphRunService, RunInput
from app.services.langgraph.stream import LangGraphStreams

#: What a join stream sends when the client names no modes.
DEFAULT_JOIN_MODES = ("values", "updates", "messages-tuple", "custom")
#: Cancellations started by a client leaving an ``on_disconnect: cancel`` stream.
_CANCELS: set[asyncio.Task[None]] = set()


#: Stream modes LangGraph's server serves and Threadkeeper does not (LangChain callback events).
UNSUPPORTED_MODES = frozenset({"events"})


def _refuse_unsupported(data: RunCreateIn) -> None:
    """422 ``not_supported`` naming the first field of the body Threadkeeper cannot honour."""
    if data.multitask_strategy in ("interrupt", "rollback"):
        raise ValidationFailed(
            "multitask_strategy must be enqueue or reject (interrupt/rollback are not supported)",
            field="multitask_strategy",
        )
    for name in ("interrupt_before", "interrupt_after"):
        if getattr(data, name):
            raise NotSupported(
                f"{name} is not supported: an agent's approvals (approval_tools) or its graph's "
                "own interrupt() stop a run for a human",
                field=name,
            )
    for mode in modes_of(data.stream_mode):
        if mode in UNSUPPORTED_MODES:
            raise NotSupported(
                f"stream mode {mode!r} is not supported (values, updates, messages-tuple, "
                "messages, custom, tasks, checkpoints and debug are)",
                field="stream_mode",
            )
    for key in (data.config or {}).keys() - {"configurable"}:
        raise NotSupported(
            f"config.{key} is not supported: only config.configurable reaches the graph",
            field=f"config.{key}",
        )


def run_input(data: RunCreateIn, thread_id: uuid.UUID | None = None) -> RunInput:
    """The run's body -> what the service needs; 422 for what Threadkeeper cannot do."""
    _refuse_unsupported(data)
    checkpoint_id = data.checkpoint.checkpoint_id if data.checkpoint else data.checkpoint_id
    configurable = graph_configurable(data.config, thread_id)
    common: dict[str, Any] = {
        "assistant_id": data.assistant_id,
        "stream_modes": tuple(modes_of(data.stream_mode)),
        "multitask_strategy": data.multitask_strategy,
        "if_not_exists": data.if_not_exists,
        "checkpoint_id": checkpoint_id,
        "configurable": configurable,
        "context": data.context or None,
        "webhook": data.webhook or None,
    }
    if data.command is not None and data.command.resume is not None:
        if data.input:
            raise ValidationFailed("send either input or command.resume", field="input")
        for name, given in (
            ("config", configurable),
            ("context", data.context),
            ("webhook", data.webhook),
        ):
            if given:
                raise NotSupported(
                    f"{name} is not supported on a resume: the resumed run goes on with what "
                    "the run it answers was created with",
                    field=name,
                )
        return RunInput(text=None, message_id=None, resume=data.command.resume, **common)
    if not data.input and checkpoint_id is not None:
        # Regenerate (Agent Chat UI's Refresh): the answer again from that checkpoint.
        return RunInput(text=None, message_id=None, regenerate=True, **common)
    try:
        parsed = msgspec.convert(data.input or {}, RunInputIn)
    except msgspec.ValidationError as exc:
        raise ValidationFailed(
            f"input must be {{messages: [one human message]}} with text content: {exc}",
            field="input",
        ) from exc
    message = parsed.messages[0]
    content = message.content
    text = content if isinstance(content, str) else "\n".join(b.text for b in content)
    if not text.strip():
        raise ValidationFailed("the message's text must not be blank", field="input.messages")
    return RunInput(text=text, message_id=message.id, **common)


#: ``configurable`` keys that are Threadkeeper's own (which thread and checkpoint a run uses).
RESERVED_CONFIGURABLE = frozenset(
    {"thread_id", "checkpoint_id", "checkpoint_ns", "checkpoint_map", "run_id", "assistant_id"}
)


def graph_configurable(
    config: dict[str, Any] | None, thread_id: uuid.UUID | None
) -> dict[str, Any] | None:
    """``config.configurable`` as the graph gets it (None: nothing). The keys that say which
    thread and checkpoint a run uses are Threadkeeper's: refused, except ``thread_id`` naming
    the run's own thread (as some clients send it)."""
    configurable = (config or {}).get("configurable")
    if configurable is None:
        return None
    if not isinstance(configurable, dict):
        raise ValidationFailed("config.configurable must be an object", field="config.configurable")
    out: dict[str, Any] = {}
    for key, value in configurable.items():
        if key == "thread_id" and thread_id is not None and str(value) == str(thread_id):
            continue
        if key in RESERVED_CONFIGURABLE or key.startswith("__"):
            raise NotSupported(
                f"config.configurable.{key} is Threadkeeper's to set (the run's thread and "
                "checkpoint come from the path and the checkpoint field)",
                field=f"config.configurable.{key}",
            )
        out[key] = value
    return out or None


def modes_of(stream_mode: str | Sequence[str]) -> list[str]:
    return [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)


def run_path(run: LangGraphRun) -> str:
    return f"/threads/{run.thread_id}/runs/{run.run_id}"


def stream_location(run: LangGraphRun) -> str:
    """The join stream (as LangGraph's server names it); joined without modes it replays the
    run's own, so a reconnect gets the parts it asked for."""
    return f"{run_path(run)}/stream"


#: What creating a run can answer besides the stack's own.
START_ERRORS = errors(
    NotFound,
    AgentMismatch,
    AgentUnavailable,
    ThreadBusy,
    NotImplementedHere,
    NotSupported,
    WebhookRefused,
    "unprocessable",
)
#: A run stream's body: server-sent events, one part each.
SSE = ResponseSpec(
    data_container=StreamPartOut,
    media_type="text/event-stream",
    description="server-sent events: one LangGraph stream part each (event, JSON data, id)",
)


class LangGraphRunController(Controller):
    path = "/threads/{thread_id:uuid}/runs"
    tags = ["runs"]

    @post(
        "/stream",
        operation_id="StreamRun",
        status_code=HTTP_200_OK,
        responses={200: SSE, **START_ERRORS, **errors(TooManyStreams)},
    )
    async def stream(
        self,
        request: Request[Any, Any, Any],
        thread_id: uuid.UUID,
        data: RunCreateIn,
        lg_runs: NamedDependency[LangGraphRunService],
        lg_streams: NamedDependency[LangGraphStreams],
    ) -> ServerSentEvent:
        principal = principal_of(request)
        ask = await _checked(request, data, thread_id)
        lease, run = await _admitted(request, lambda: lg_runs.start(thread_id, principal, ask))
        _webhook(request, ask, run, principal, lg_runs, lg_streams)
        modes = modes_of(data.stream_mode)
        parts = _parts(request, lg_streams, run, modes, with_ids=data.stream_resumable)
        canceller = lg_runs if data.on_disconnect == "cancel" else None
        return ServerSentEvent(
            _frames(parts, lease, canceller, run, principal, request.app.state.followers),
            headers={"Content-Location": run_path(run), "Location": stream_location(run)},
        )

    @post(
        "/wait",
        operation_id="WaitRun",
        status_code=HTTP_200_OK,
        responses={**START_ERRORS, **errors(TooManyStreams)},
    )
    async def wait(
        self,
        request: Request[Any, Any, Any],
        thread_id: uuid.UUID,
        data: RunCreateIn,
        lg_runs: NamedDependency[LangGraphRunService],
        lg_streams: NamedDependency[LangGraphStreams],
    ) -> Response[RunValuesOut]:
        principal = principal_of(request)
        ask = await _checked(request, data, thread_id)
        with request.app.state.followers.hold(principal):
            run = await lg_runs.start(thread_id, principal, ask)
            _webhook(request, ask, run, principal, lg_runs, lg_streams)
            body = await final_values(_parts(request, lg_streams, run, ["values"]))
        return Response(body, headers={"Content-Location": run_path(run)})

    @post("/", operation_id="CreateRun", status_code=HTTP_200_OK, responses=START_ERRORS)
    async def create(
        self,
        request: Request[Any, Any, Any],
        thread_id: uuid.UUID,
        data: RunCreateIn,
        lg_runs: NamedDependency[LangGraphRunService],
        lg_streams: NamedDependency[LangGraphStreams],
    ) -> Response[RunOut]:
        principal = principal_of(request)
        ask = await _checked(request, data, thread_id)
        run = await lg_runs.start(thread_id, principal, ask)
        _webhook(request, ask, run, principal, lg_runs, lg_streams)
        return Response(run_out(run), headers={"Content-Location": run_path(run)})

    @get("/", operation_id="ListRuns", responses=errors(NotFound))
    async def list_runs(
        self,
        thread_id: uuid.UUID,
        principal: NamedDependency[str],
        lg_runs: NamedDependency[LangGraphRunService],
        limit: Annotated[int, Parameter(ge=1, le=1000)] = 10,
        offset: Annotated[int, Parameter(ge=0)] = 0,
    ) -> list[RunOut]:
        """Newest first; a resume is a run of its own."""
        runs = await lg_runs.list(thread_id, principal, limit=limit, offset=offset)
        return [run_out(r) for r in runs]

    @get("/{run_id:uuid}", operation_id="GetRun", responses=errors(NotFound))
    async def get_run(
        self,
        thread_id: uuid.UUID,
        run_id: uuid.UUID,
        principal: NamedDependency[str],
        lg_runs: NamedDependency[LangGraphRunService],
    ) -> RunOut:
        return run_out(await lg_runs.get(thread_id, run_id, principal))

    @delete(
        "/{run_id:uuid}",
        operation_id="DeleteRun",
        status_code=HTTP_204_NO_CONTENT,
        responses=errors(NotFound, ThreadBusy, NotImplementedHere),
    )
    async def delete_run(
        self,
        thread_id: uuid.UUID,
        run_id: uuid.UUID,
        principal: NamedDependency[str],
        lg_runs: NamedDependency[LangGraphRunService],
    ) -> None:
        await lg_runs.delete(thread_id, run_id, principal)

    @post(
        "/{run_id:uuid}/cancel",
        operation_id="CancelRun",
        status_code=HTTP_202_ACCEPTED,
        responses=errors(NotFound, ThreadBusy, NotSupported),
    )
    async def cancel(
        self,
        request: Request[Any, Any, Any],
        thread_id: uuid.UUID,
        run_id: uuid.UUID,
        lg_runs: NamedDependency[LangGraphRunService],
        lg_streams: NamedDependency[LangGraphStreams],
        wait: bool = False,
        action: Literal["interrupt", "rollback"] = "interrupt",
    ) -> None:
        """``wait``: answer once the run has stopped (its worker ends it at its next step), not
        when the cancel was asked for. ``action=rollback`` (delete the run and what it wrote)
        is not supported: a cancelled run stays in the thread's history."""
        if action == "rollback":
            raise NotSupported(
                "action=rollback is not supported: a cancelled run stays in the thread's "
                "history (cancel with action=interrupt, then fork from an earlier checkpoint)",
                field="action",
            )
        principal = principal_of(request)
        await lg_runs.cancel(thread_id, run_id, principal)
        if wait:
            with request.app.state.followers.hold(principal):
                run = await lg_runs.get(thread_id, run_id, principal)
                await lg_streams.until_stopped(
                    run, principal, stop=request.app.state.followers.closing
                )

    @get("/{run_id:uuid}/join", operation_id="JoinRun", responses=errors(NotFound, TooManyStreams))
    async def join(
        self,
        request: Request[Any, Any, Any],
        thread_id: uuid.UUID,
        run_id: uuid.UUID,
        lg_runs: NamedDependency[LangGraphRunService],
        lg_streams: NamedDependency[LangGraphStreams],
    ) -> RunValuesOut:
        principal = principal_of(request)
        with request.app.state.followers.hold(principal):
            run = await lg_runs.get(thread_id, run_id, principal)
            return await final_values(_parts(request, lg_streams, run, ["values"]))

    @get(
        "/{run_id:uuid}/stream",
        operation_id="JoinRunStream",
        responses={200: SSE, **errors(NotFound, TooManyStreams, "unprocessable")},
    )
    async def join_stream(
        self,
        request: Request[Any, Any, Any],
        thread_id: uuid.UUID,
        run_id: uuid.UUID,
        lg_runs: NamedDependency[LangGraphRunService],
        lg_streams: NamedDependency[LangGraphStreams],
        stream_mode: list[str] | None = None,
        cancel_on_disconnect: bool = False,
    ) -> ServerSentEvent:
        """Replays the run from the start, or after ``Last-Event-ID``, in the modes named, else
        the run's own; a finished run's stream ends at once after its parts, so clients stop
        reconnecting. (langgraph-sdk sends ``stream_mode=`` empty when it names none.)"""
        named = [m for m in stream_mode or [] if m]
        principal = principal_of(request)
        after = parse_last_event_id(request.headers.get("last-event-id"))
        lease, run = await _admitted(request, lambda: lg_runs.get(thread_id, run_id, principal))
        modes = named or run.stream_modes or DEFAULT_JOIN_MODES
        parts = _parts(request, lg_streams, run, modes, after=after, with_ids=True)
        canceller = lg_runs if cancel_on_disconnect else None
        followers = request.app.state.followers
        return ServerSentEvent(_frames(parts, lease, canceller, run, principal, followers))


async def _checked(
    request: Request[Any, Any, Any], data: RunCreateIn, thread_id: uuid.UUID
) -> RunInput:
    """The run's body as the service takes it, its webhook URL checked (request time)."""
    ask = run_input(data, thread_id)
    if ask.webhook is not None:
        await request.app.state.webhooks.check(ask.webhook)
    return ask


def _webhook(
    request: Request[Any, Any, Any],
    ask: RunInput,
    run: LangGraphRun,
    principal: str,
    runs: LangGraphRunService,
    streams: LangGraphStreams,
) -> None:
    if ask.webhook is not None:
        request.app.state.webhooks.deliver_when_done(ask.webhook, run, principal, runs, streams)


async def _admitted(
    request: Request[Any, Any, Any], opening: Callable[[], Awaitable[LangGraphRun]]
) -> tuple[FollowerLease, LangGraphRun]:
    """A follower slot for the stream (429 when the principal holds too many), then the run."""
    lease = request.app.state.followers.admit(principal_of(request))
    try:
        return lease, await opening()
    except BaseException:
        lease.release()
        raise


def _parts(
    request: Request[Any, Any, Any],
    streams: LangGraphStreams,
    run: LangGraphRun,
    modes: Sequence[str],
    *,
    after: Cursor | None = None,
    with_ids: bool = False,
) -> AsyncIterator[Part | None]:
    followers: Followers = request.app.state.followers
    return stream_parts(
        streams,
        run,
        principal_of(request),
        modes,
        after=after or Cursor(),
        with_ids=with_ids,
        keepalive=KEEPALIVE_SECONDS,
        stop=followers.closing,
    )


async def _frames(
    parts: AsyncIterator[Part | None],
    lease: FollowerLease,
    canceller: LangGraphRunService | None,
    run: LangGraphRun,
    principal: str,
    followers: Followers,
) -> AsyncGenerator[ServerSentEventMessage, None]:
    ended = False
    try:
        async for part in parts:
            if part is None:
                yield ServerSentEventMessage(comment="keep-alive", data=None)
                continue
            yield ServerSentEventMessage(
                data=msgspec.json.encode(part.data).decode(), event=part.event, id=part.id
            )
        ended = True
    finally:
        lease.release()
        if canceller is not None and not ended and not followers.closing.is_set():
            # The client left an ``on_disconnect: cancel`` stream: cancel the run.
            task = asyncio.ensure_future(canceller.cancel(run.thread_id, run.run_id, principal))
            _CANCELS.add(task)
            task.add_done_callback(_CANCELS.discard)
