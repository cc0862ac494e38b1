"""Run requests: where a posted message stands (GetRequest) and withdrawing it (CancelRequest)."""

from __future__ import annotations

import uuid
from typing import Annotated

from litestar import Controller, Request, get, post
from litestar.di import NamedDependency
from litestar.params import Parameter
from litestar.status_codes import HTTP_200_OK

from app.api.errors import errors
from app.api.followers import Followers
from app.api.schemas import RequestOut
from app.domain.errors import (
    NotFound,
    RequestNotQueued,
    StreamsUnavailable,
    ThreadBusy,
    TooManyStreams,
)
from app.services.run_feed import RunFeed
from app.services.runs import RequestView, RunService

#: Longest WaitRequest long-poll (seconds), as WaitRun's.
MAX_WAIT_SECONDS = 30.0


def request_out(view: RequestView) -> RequestOut:
    r, run = view.request, view.run
    return RequestOut(
        id=r.id,
        thread_id=r.thread_id,
        message_id=uuid.UUID(r.payload["message_id"]),
        status=r.status.value,
        run_id=run.id if run is not None else None,
        run_status=run.status.value if run is not None else None,
        created_at=r.created_at,
    )


class RequestController(Controller):
    path = "/v1/requests"
    tags = ["runs"]

    @get(
        "/{request_id:str}",
        operation_id="GetRequest",
        responses=errors(NotFound),
        description=(
            "PostMessage's `request_id`: `queued` until a worker takes it, then `dispatched` "
            "with the `run_id` answering it (wait for it with WaitRun); `cancelled` if withdrawn."
        ),
    )
    async def get_request(
        self,
        request_id: uuid.UUID,
        principal: NamedDependency[str],
        run_service: NamedDependency[RunService],
    ) -> RequestOut:
        return request_out(await run_service.get_request(request_id, principal))

    @get(
        "/{request_id:str}/wait",
        operation_id="WaitRequest",
        responses=errors(NotFound, TooManyStreams, StreamsUnavailable),
        description=(
            "Long-poll: answers as soon as the request is no longer `queued` — `dispatched` "
            "with the `run_id` of the run answering it (follow it with WaitRun or "
            "StreamRunEvents), or `cancelled` — or after `timeout` seconds (0-30, default 30) "
            "still `queued` (earlier when the server shuts down); call again then. Counts "
            "towards the same cap as event streams and WaitRun: 429 `too_many_streams`."
        ),
    )
    async def wait_request(
        self,
        request_id: uuid.UUID,
        principal: NamedDependency[str],
        request: Request,  # type: ignore[type-arg]
        run_feed: NamedDependency[RunFeed],
        timeout: Annotated[float, Parameter(ge=0, le=MAX_WAIT_SECONDS)] = MAX_WAIT_SECONDS,
    ) -> RequestOut:
        followers: Followers = request.app.state.followers
        with followers.hold(principal):
            view = await run_feed.wait_request(
                request_id, principal, timeout, stop=followers.closing
            )
        return request_out(view)

    @post(
        "/{request_id:str}/cancel",
        operation_id="CancelRequest",
        status_code=HTTP_200_OK,
        responses=errors(NotFound, ThreadBusy, RequestNotQueued),
        description=(
            "Withdraw a queued message before any run takes it: the request becomes `cancelled`, "
            "the user message stays in ListMessages with `withdrawn: true` and never reaches the "
            "model. Repeating it answers the same. Once dispatched: 409 `request_not_queued` "
            "(cancel the run with CancelRun instead)."
        ),
    )
    async def cancel_request(
        self,
        request_id: uuid.UUID,
        principal: NamedDependency[str],
        run_service: NamedDependency[RunService],
    ) -> RequestOut:
        return request_out(await run_service.cancel_request(request_id, principal))
