"""The OpenAPI document's error responses, written from each operation's declaration
(``app/api/error_declarations.py``), and details Litestar's ResponseSpec cannot express:
``Retry-After`` headers, ``x-error-codes``, security requirements listed once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from litestar import Litestar
from litestar.handlers.http_handlers import HTTPRouteHandler
from litestar.openapi.spec import (
    OpenAPI,
    OpenAPIHeader,
    OpenAPIMediaType,
    OpenAPIResponse,
    Operation,
    Reference,
    Schema,
)
from litestar.openapi.spec.enums import OpenAPIType
from litestar.routes import HTTPRoute

from app.api.error_declarations import declared_errors, describe

#: Codes whose answers carry ``Retry-After`` (seconds).
RETRY_AFTER_CODES = frozenset(
    {
        "thread_busy",
        "rate_limited",
        "too_many_streams",
        "database_unavailable",
        "database_not_migrated",
        "streams_unavailable",
    }
)


@dataclass
class ErrorResponse(OpenAPIResponse):
    """An error response that also lists its ``error`` codes for tools (``x-error-codes``)."""

    error_codes: list[str] = field(default_factory=list, metadata={"alias": "x-error-codes"})


def _retry_after() -> OpenAPIHeader:
    return OpenAPIHeader(
        schema=Schema(type=OpenAPIType.INTEGER, minimum=1),
        description="Seconds to wait before retrying.",
    )


def _operations(openapi: OpenAPI) -> list[Operation]:
    ops: list[Operation] = []
    for item in (openapi.paths or {}).values():
        for method in ("get", "put", "post", "delete", "patch"):
            op = getattr(item, method, None)
            if op is not None:
                ops.append(op)
    return ops


def error_response(codes: tuple[str, ...]) -> ErrorResponse:
    """The response of one status: its codes, what each means, ``Retry-After`` if any has it."""
    retry = any(code in RETRY_AFTER_CODES for code in codes)
    return ErrorResponse(
        description=describe(codes),
        headers={"Retry-After": _retry_after()} if retry else None,
        content={
            "application/json": OpenAPIMediaType(
                schema=Reference(ref="#/components/schemas/ErrorBody")
            )
        },
        error_codes=list(codes),
    )


def document_errors(app: Litestar) -> None:
    """Every operation's error responses, exactly the statuses and codes it declares."""
    openapi = app.openapi_schema
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        item = (openapi.paths or {}).get(route.path_format)
        for handler in route.route_handlers:
            if item is None or not isinstance(handler, HTTPRouteHandler):
                continue
            if not handler.resolve_include_in_schema():
                continue
            for method in handler.http_methods:
                op = getattr(item, method.lower(), None)
                if op is None:
                    continue
                responses = op.responses if op.responses is not None else {}
                for status, codes in declared_errors(handler).items():
                    existing = responses.get(str(status))
                    if isinstance(existing, OpenAPIResponse) and not existing.content:
                        continue  # not an error body (e.g. /ready's 503 is a HealthOut)
                    if isinstance(existing, OpenAPIResponse) and _is_health(existing):
                        continue
                    responses[str(status)] = error_response(codes)
                _document_headers(handler, responses)
                op.responses = dict(sorted(responses.items()))


def _document_headers(handler: HTTPRouteHandler, responses: dict[str, Any]) -> None:
    """The handler's documented headers on its success response, also when a ResponseSpec
    replaced Litestar's default one (which alone would carry them)."""
    success = responses.get(str(handler.status_code))
    if not isinstance(success, OpenAPIResponse):
        return
    for header in handler.resolve_response_headers():
        if header.documentation_only:
            success.headers = {
                **(success.headers or {}),
                header.name: OpenAPIHeader(
                    schema=Schema(type=OpenAPIType.STRING), description=header.description
                ),
            }


def _is_health(response: OpenAPIResponse) -> bool:
    media = (response.content or {}).get("application/json")
    schema = media.schema if media is not None else None
    return isinstance(schema, Reference) and schema.ref.endswith("/HealthOut")


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
