"""Run requests: where a posted message stands (GetRequest) and withdrawing it (CancelRequest)."""

from __future__ import annotations

import uuid

from litestar import Controller, get, post
from litestar.di import NamedDependency
from litestar.status_codes import HTTP_200_OK

from app.api.errors import errors
from app.api.schemas import RequestOut
from app.services.runs import RequestView, RunService


def request_out(view: RequestView) -> RequestOut:
    r, run = view.request, view.run
    return RequestOut(
        id=r.id,
        thread_id=r.conversation_id,
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
        "/{request_id:uuid}",
        operation_id="GetRequest",
        responses=errors(401, 404),
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

    @post(
        "/{request_id:uuid}/cancel",
        operation_id="CancelRequest",
        status_code=HTTP_200_OK,
        responses=errors(401, 404, 409),
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
