"""The one place where domain and framework errors become ``{"error", "detail"}`` HTTP bodies."""

from __future__ import annotations

import re
from typing import Any

import structlog
from litestar import Request, Response
from litestar.connection import ASGIConnection
from litestar.exceptions import (
    HTTPException,
    NotAuthorizedException,
    NotFoundException,
    ValidationException,
)
from litestar.handlers.base import BaseRouteHandler
from litestar.handlers.http_handlers import HTTPRouteHandler
from sqlalchemy.exc import DBAPIError

from app.api.error_codes import FRAMEWORK_CODES, HTTP_ERROR, status_of
from app.api.error_declarations import declared_errors
from app.api.error_declarations import errors as errors  # what controllers declare with
from app.db.errors import RETRYABLE_FAULTS, Fault, fault_of, is_connection_error
from app.domain.errors import (
    DatabaseUnavailable,
    DomainError,
    InvalidToken,
    NotSupported,
    SchemaNotMigrated,
    ServiceUnavailable,
    ValidationFailed,
)

log = structlog.get_logger(__name__)


def _body(
    code: str,
    detail: str,
    headers: dict[str, str] | None = None,
    fields: list[dict[str, str]] | None = None,
    *,
    status: int | None = None,
) -> Response[Any]:
    """The answer of ``code``, at its one status (``status`` only for ``http_error``, the
    framework's code without a fixed one)."""
    if code != HTTP_ERROR:
        status = status_of(code)
    assert status is not None
    # Every field is always sent (the document marks them required): ``fields`` null when none.
    content: dict[str, Any] = {"error": code, "detail": detail, "fields": fields or None}
    return Response(content=content, status_code=status, headers=headers)


#: Seconds a client should wait before retrying after 503 ``database_unavailable``.
DATABASE_RETRY_AFTER = "2"


#: ``Retry-After`` (seconds) on 409 thread_busy: the lock holder is usually a short transaction
#: or a run; clients should back off rather than hammer the thread's row lock.
THREAD_BUSY_RETRY_AFTER = {"Retry-After": "1"}


def domain_error_handler(_: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    assert isinstance(exc, DomainError)
    if isinstance(exc, ServiceUnavailable):
        headers: dict[str, str] | None = {"Retry-After": DATABASE_RETRY_AFTER}
    elif exc.retry_after is not None:
        headers = {"Retry-After": exc.retry_after}
    elif isinstance(exc, InvalidToken):  # RFC 6750 3.1: a bearer token was sent and refused
        headers = {"WWW-Authenticate": 'Bearer error="invalid_token"'}
    else:
        headers = THREAD_BUSY_RETRY_AFTER if exc.code == "thread_busy" else None
    fields = None
    if isinstance(exc, ValidationFailed | NotSupported) and exc.field:
        fields = [{"field": exc.field, "message": exc.detail}]
    return _body(exc.code, exc.detail, headers, fields=fields)


def database_unavailable(request: Request[Any, Any, Any], exc: BaseException) -> Response[Any]:
    """Any driver's "cannot reach the database" is the server's transient problem (503, retry),
    never a 500; the driver's text (host names, ports) stays in the server log."""
    log.warning("database_unavailable", path=request.url.path, error=type(exc).__name__)
    return domain_error_handler(request, DatabaseUnavailable())


async def migrated_schema_guard(
    connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler
) -> None:
    """Until the schema is at head every ``/v1`` query would fail on a missing table (a 500 and
    a traceback per request): answer 503 ``database_not_migrated`` instead, like ``/ready``."""
    if not await connection.app.state.container.schema_at_head():
        log.warning("database_not_migrated", path=connection.url.path)
        raise SchemaNotMigrated()


_NAMED_FIELD = re.compile(r"field `([^`]+)`")


def field_errors(extra: Any) -> list[dict[str, str]]:
    """Litestar's validation ``extra`` -> ``[{field, message}]``, for clients to show per field.

    Body paths keep msgspec's form (``decisions[0].type``); an error about the whole body
    (unknown or missing field) is attributed to the field its message names.
    """
    out: list[dict[str, str]] = []
    for item in extra if isinstance(extra, list) else []:
        if not isinstance(item, dict):
            continue
        message = str(item.get("message") or "invalid value")
        key = str(item.get("key") or "")
        if item.get("source") == "body" and key in ("", "data"):
            named = _NAMED_FIELD.search(message)
            key = named.group(1) if named else "body"
        elif item.get("source") == "header":  # Litestar names the argument, not the header
            key = "-".join(part.capitalize() for part in key.split("_"))
        out.append({"field": key or "body", "message": message})
    return out


def validation_handler(_: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    assert isinstance(exc, ValidationException)
    fields = field_errors(exc.extra)
    if fields:
        detail = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
    else:  # e.g. malformed JSON: Litestar's own sentence, never a Python repr
        detail = str(exc.detail)
    return _body("validation_error", detail, fields=fields)


def http_error_handler(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    assert isinstance(exc, HTTPException)
    if isinstance(exc, NotAuthorizedException):
        return _body("unauthorized", str(exc.detail), {"WWW-Authenticate": "Bearer"})
    code = "not_found" if isinstance(exc, NotFoundException) else None
    code = code or FRAMEWORK_CODES.get(exc.status_code, HTTP_ERROR)
    detail = str(exc.detail)
    if exc.status_code == 413:
        # What the limit is and which setting raises it, not "Request Entity Too Large".
        limit = request.app.request_max_body_size
        detail = (
            f"the request body is over this server's limit of {limit} bytes "
            "(THREADKEEPER_MAX_REQUEST_BYTES)"
        )
    return _body(code, detail, exc.headers or None, status=exc.status_code)


def internal_error_handler(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    if is_connection_error(exc):
        return database_unavailable(request, exc)
    log.error("unhandled_error", path=request.url.path, error=repr(exc), exc_info=exc)
    return _body("internal_error", "internal server error")


def database_error_handler(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """SQL errors the client caused or may retry; a lost connection ends as 503 (see above)."""
    assert isinstance(exc, DBAPIError)
    fault = fault_of(exc)
    if fault is Fault.UNSTORABLE_TEXT:
        # e.g. a NUL character: the client's data, not our bug; the transaction was rolled back.
        return _body(
            "validation_error", "text contains characters that cannot be stored (e.g. NUL)"
        )
    if fault in RETRYABLE_FAULTS:  # the other transaction went through
        return _body(
            "thread_busy",
            "a concurrent operation on the thread won; retry",
            THREAD_BUSY_RETRY_AFTER,
        )
    return internal_error_handler(request, exc)


#: Answers whose code the operation did not declare (app/api/error_declarations.py), as
#: ``"Operation status code"``; the tests fail on any. Bounded: it only ever lists bugs.
UNDECLARED: list[str] = []


def _checked(handler: Any) -> Any:
    """``handler``, plus the check that its answer is declared for the operation."""

    def answer(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
        response: Response[Any] = handler(request, exc)
        route = request.scope.get("route_handler")
        content = response.content if isinstance(response.content, dict) else {}
        code = str(content.get("error", ""))
        if (
            isinstance(route, HTTPRouteHandler)
            and route.resolve_include_in_schema()  # an operation of the document
            and code
        ):
            declared = declared_errors(route).get(int(response.status_code or 500), ())
            if code not in declared:
                found = f"{route.operation_id} {response.status_code} {code}"
                log.error("undeclared_error", operation=found)
                if len(UNDECLARED) < 100:
                    UNDECLARED.append(found)
        return response

    return answer


EXCEPTION_HANDLERS: dict[type[Exception] | int, Any] = {
    DomainError: _checked(domain_error_handler),
    DBAPIError: _checked(database_error_handler),
    ValidationException: _checked(validation_handler),
    HTTPException: _checked(http_error_handler),
    Exception: _checked(internal_error_handler),
}
