"""Which error each operation can answer: declared once per route handler, read twice.

A controller states the refusals its use case raises (``responses=errors(NotFound,
ThreadBusy, ...)``); ``declared_errors(handler)`` adds what the stack answers for any route of
its kind (400 for any bad input, 401/429/503 for authenticated routes, 413 where a body is
read, 405/408/431/500 from routing and the HTTP server). The same map feeds the OpenAPI
document (``app/api/openapi.py``: one response per status, its codes listed in the description
and as ``x-error-codes``, its body narrowed to them) and the runtime check in
``app/api/errors.py`` that logs (and counts, for the tests) any answered code the operation did
not declare.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from litestar.handlers.http_handlers import HTTPRouteHandler
from litestar.openapi.datastructures import ResponseSpec

from app.api.schemas import ErrorBody
from app.domain.errors import DomainError

#: What each code means, for the descriptions (one sentence each).
MEANINGS: dict[str, str] = {
    "validation_error": "malformed JSON, an unknown field, a bad value, parameter or id, "
    "two Authorization headers",
    "unauthorized": "no credential: send `Authorization: Bearer <API key or token>`",
    "invalid_token": "the bearer credential was refused: an unknown API key, or a token that is "
    "invalid, expired or not issued for this service (`WWW-Authenticate: Bearer "
    'error="invalid_token"`)',
    "identity_provider_unavailable": "the token's signing key cannot be fetched from the "
    "identity provider right now; retry after `Retry-After` s",
    "not_found": "no such resource for this principal",
    "method_not_allowed": "the path does not take this method",
    "request_timeout": "the request head did not arrive in time (the connection is closed)",
    "payload_too_large": "the body is over the server's limit (THREADKEEPER_MAX_REQUEST_BYTES)",
    "request_header_too_large": "the request line and headers exceed the server's limit",
    "rate_limited": "this principal's request rate is over the limit; retry after `Retry-After` s",
    "too_many_streams": "this principal's open event streams and long-polls are at the limit; "
    "retry after `Retry-After` s",
    "internal_error": "a server bug; the response's X-Request-ID names it in the log",
    "database_unavailable": "the database cannot be reached right now; retry after `Retry-After` s",
    "database_not_migrated": "the schema is not migrated yet; retry after `Retry-After` s",
    "streams_unavailable": "this process follows as many runs as it can or is shutting down; "
    "refused before the stream starts, retry",
    "thread_busy": "the thread has a running or interrupted run or queued input, or its lock "
    "is held; retry after `Retry-After` s",
    "invalid_state": "the run is not in a state that allows this",
    "request_not_queued": "a run already took this request; cancel the run instead",
    "idempotency_key_reused": "the Idempotency-Key was used on this thread with another body",
    "nothing_to_compress": "nothing could be offloaded or summarized",
    "compression_failed": "the summarizer failed; nothing was written",
    "workdir_unavailable": "the Workdir could not be written; nothing was changed",
    "unknown_agent": "`agent_id` names no registered agent (ListAgents lists them)",
    "agent_unavailable": "the thread's agent is not registered any more, or cannot run now (an "
    "MCP server it uses does not answer: retried, `Retry-After` names the next attempt)",
    "not_supported": "the thread's agent does not declare the capability this needs",
}

#: ``errors(404)`` (a bare status) stands for these codes: the older spelling, still accepted.
_STATUS_DEFAULTS: dict[int, tuple[str, ...]] = {
    400: ("validation_error",),
    401: ("unauthorized",),
    404: ("not_found",),
    409: ("thread_busy",),
    413: ("payload_too_large",),
    422: ("validation_error",),
    429: ("too_many_streams",),
    502: ("compression_failed",),
    503: ("database_unavailable",),
    507: ("workdir_unavailable",),
}


@dataclass
class ErrorSpec(ResponseSpec):
    """A ResponseSpec that also names the ``error`` codes of its status."""

    codes: tuple[str, ...] = field(default=())


Declared = type[DomainError] | int | tuple[int, str]


def describe(codes: Iterable[str]) -> str:
    return " / ".join(f"`{c}`: {MEANINGS.get(c, c)}" for c in codes)


def _pairs(kinds: Iterable[Declared]) -> list[tuple[int, str]]:
    pairs: list[tuple[int, str]] = []
    for kind in kinds:
        if isinstance(kind, int):
            pairs += [(kind, code) for code in _STATUS_DEFAULTS.get(kind, ("http_error",))]
        elif isinstance(kind, tuple):
            pairs.append(kind)
        else:
            pairs.append((kind.status_code, kind.code))
    return pairs


def _group(pairs: Iterable[tuple[int, str]]) -> dict[int, tuple[str, ...]]:
    grouped: dict[int, list[str]] = {}
    for status, code in pairs:
        codes = grouped.setdefault(status, [])
        if code not in codes:
            codes.append(code)
    return {status: tuple(grouped[status]) for status in sorted(grouped)}


def errors(*kinds: Declared) -> dict[int, ResponseSpec]:
    """The refusals an operation's use case raises: domain error classes (their status and
    code), ``(status, code)`` pairs, or a bare status (its usual code)."""
    return {
        status: ErrorSpec(data_container=ErrorBody, description=describe(codes), codes=codes)
        for status, codes in _group(_pairs(kinds)).items()
    }


def _secured(handler: HTTPRouteHandler) -> bool:
    return bool(handler.resolve_security())


def _reads_body(handler: Any) -> bool:
    return "data" in handler.parsed_fn_signature.parameters


def declared_errors(handler: HTTPRouteHandler) -> dict[int, tuple[str, ...]]:
    """Every (status -> codes) the operation can answer: its own and the stack's."""
    pairs: list[tuple[int, str]] = [
        (400, "validation_error"),
        (405, "method_not_allowed"),
        (408, "request_timeout"),
        (431, "request_header_too_large"),
        (500, "internal_error"),
    ]
    if _secured(handler):
        pairs += [
            (401, "unauthorized"),
            (401, "invalid_token"),
            (429, "rate_limited"),
            (503, "database_unavailable"),
            (503, "database_not_migrated"),
            (503, "identity_provider_unavailable"),
        ]
    if _reads_body(handler):
        pairs.append((413, "payload_too_large"))
    for status, spec in (getattr(handler, "responses", None) or {}).items():
        if isinstance(spec, ErrorSpec):
            pairs += [(status, code) for code in spec.codes]
    return _group(pairs)
