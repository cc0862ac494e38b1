"""The OpenAPI document's error responses, written from each operation's declaration
(``app/api/error_declarations.py``), and details Litestar's ResponseSpec cannot express:
``Retry-After`` headers, ``x-error-codes``, security requirements listed once.

Each error response's body is narrowed to its codes, so a generated client can tell them apart
per operation: one pair of components per distinct set of codes, shared by every (operation,
status) that answers exactly that set, named from the codes in ``ErrorCode``'s order
(``error_names``): the body ``<Stem>Error`` has ErrorBody's fields, its ``error`` being the
enum ``<Stem>Code`` of exactly those codes. CancelRun's 409 is ``ThreadBusyOrInvalidStateError``
with ``error: ThreadBusyOrInvalidStateCode`` (``thread_busy`` | ``invalid_state``); every 404
is ``NotFoundError`` with ``error: NotFoundCode``. ``ErrorBody`` / ``ErrorCode`` stay as the
shape and the codes of any error.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
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
from app.api.schemas import ErrorCode

_REF = "#/components/schemas/"
#: The order codes are named and listed in: the ``ErrorCode`` enum's.
_CODE_ORDER = {code.value: i for i, code in enumerate(ErrorCode)}

#: Codes whose answers carry ``Retry-After`` (seconds).
RETRY_AFTER_CODES = frozenset(
    {
        "thread_busy",
        "rate_limited",
        "too_many_streams",
        "database_unavailable",
        "database_not_migrated",
        "streams_unavailable",
        "identity_provider_unavailable",
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


def canonical_codes(codes: Iterable[str]) -> tuple[str, ...]:
    """``codes`` once each, in ``ErrorCode``'s order (one set, one spelling)."""
    unknown = sorted(set(codes) - set(_CODE_ORDER))
    if unknown:
        raise ValueError(f"error codes missing from ErrorCode: {unknown}")
    return tuple(sorted(set(codes), key=_CODE_ORDER.__getitem__))


def _pascal(code: str) -> str:
    return "".join(part.capitalize() for part in code.split("_"))


def error_names(codes: Iterable[str]) -> tuple[str, str]:
    """The body and the enum component of one set of codes: ``("ThreadBusyOrInvalidStateError",
    "ThreadBusyOrInvalidStateCode")``; ``validation_error`` alone is ``ValidationError``."""
    stem = "Or".join(_pascal(code) for code in canonical_codes(codes))
    return (stem if stem.endswith("Error") else f"{stem}Error"), f"{stem}Code"


def _error_components(codes: tuple[str, ...], body: Schema) -> dict[str, Schema]:
    """``ErrorBody`` (``body``) with ``error`` narrowed to ``codes``, and the enum of them."""
    body_name, enum_name = error_names(codes)
    ordered = canonical_codes(codes)
    quoted = [f"`{code}`" for code in ordered]
    listed = " or ".join(filter(None, [", ".join(quoted[:-1]), quoted[-1]]))
    narrowed = copy.deepcopy(body)
    narrowed.title = body_name
    narrowed.description = f"An ErrorBody whose `error` is {listed}."
    narrowed.properties = {**(narrowed.properties or {}), "error": Reference(ref=_REF + enum_name)}
    enum = Schema(
        type=OpenAPIType.STRING,
        enum=list(ordered),
        title=enum_name,
        description=f"The `error` codes {body_name} carries: {describe(ordered)}.",
    )
    return {body_name: narrowed, enum_name: enum}


def error_response(codes: tuple[str, ...]) -> ErrorResponse:
    """The response of one status: its codes, what each means, ``Retry-After`` if any has it,
    and the body narrowed to those codes (``error_names``)."""
    retry = any(code in RETRY_AFTER_CODES for code in codes)
    return ErrorResponse(
        description=describe(codes),
        headers={"Retry-After": _retry_after()} if retry else None,
        content={
            "application/json": OpenAPIMediaType(schema=Reference(ref=_REF + error_names(codes)[0]))
        },
        error_codes=list(codes),
    )


def document_errors(app: Litestar) -> None:
    """Every operation's error responses, exactly the statuses and codes it declares, and the
    narrowed bodies they name."""
    openapi = app.openapi_schema
    code_sets: set[tuple[str, ...]] = set()
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
                    code_sets.add(canonical_codes(codes))
                _document_headers(handler, responses)
                op.responses = dict(sorted(responses.items()))
    _add_error_components(openapi, code_sets)


def _add_error_components(openapi: OpenAPI, code_sets: Iterable[tuple[str, ...]]) -> None:
    schemas = dict(openapi.components.schemas or {})
    body = schemas["ErrorBody"]
    assert isinstance(body, Schema)
    for prop in (body.properties or {}).values():
        if isinstance(prop, Schema):
            prop.default = None  # a response's field: always sent, so required with no default
    body.required = sorted(body.properties or {})
    for codes in sorted(code_sets):
        for name, schema in _error_components(codes, body).items():
            if schemas.get(name, schema) != schema:
                raise ValueError(f"error component {name} collides with a schema of that name")
            schemas[name] = schema
    openapi.components.schemas = dict(sorted(schemas.items()))


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
