"""OpenAPI details Litestar's ResponseSpec cannot express: ``Retry-After`` on 409 and 429."""

from __future__ import annotations

from litestar.openapi.spec import OpenAPI, OpenAPIHeader, OpenAPIResponse, Operation, Schema
from litestar.openapi.spec.enums import OpenAPIType

RATE_LIMITED_DESCRIPTION = (
    "rate_limited: this principal's request rate is over the limit; retry after `Retry-After` s"
)


def _retry_after(what: str) -> OpenAPIHeader:
    return OpenAPIHeader(
        schema=Schema(type=OpenAPIType.INTEGER, minimum=1),
        description=f"Seconds to wait before retrying ({what}).",
    )


def _operations(openapi: OpenAPI) -> list[Operation]:
    ops: list[Operation] = []
    for item in (openapi.paths or {}).values():
        for method in ("get", "put", "post", "delete", "patch"):
            op = getattr(item, method, None)
            if op is not None:
                ops.append(op)
    return ops


def document_retry_after(openapi: OpenAPI) -> None:
    """Every authenticated operation may answer 429; every 409 carries ``Retry-After``."""
    for op in _operations(openapi):
        responses = op.responses if op.responses is not None else {}
        busy = responses.get("409")
        if isinstance(busy, OpenAPIResponse):
            busy.headers = {**(busy.headers or {}), "Retry-After": _retry_after("thread_busy")}
        limited = responses.get("429")
        if isinstance(limited, OpenAPIResponse):  # declared by the operation (too_many_streams)
            limited.headers = {
                **(limited.headers or {}),
                "Retry-After": _retry_after("rate_limited / too_many_streams"),
            }
        error = responses.get("400")
        if op.security and "429" not in responses and isinstance(error, OpenAPIResponse):
            responses["429"] = OpenAPIResponse(
                description=RATE_LIMITED_DESCRIPTION,
                headers={"Retry-After": _retry_after("rate_limited")},
                content=error.content,
            )


def dedupe_security(openapi: OpenAPI) -> None:
    """A route that adds an alternative (StreamRunEvents: a stream token) gets the router's
    ``BearerAuth`` twice from Litestar's merge: keep each requirement once, in order."""
    for op in _operations(openapi):
        if op.security:
            unique: list[dict[str, list[str]]] = []
            for requirement in op.security:
                if requirement not in unique:
                    unique.append(requirement)
            op.security = unique
