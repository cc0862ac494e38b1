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

from app.api.error_codes import status_of
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
    "agent_mismatch": "the thread's agent is fixed where it was chosen; this names another",
    "not_supported": "the thread's agent does not declare the capability this needs, or the "
    "request names a feature Threadkeeper does not do (`fields` names it)",
    "webhook_refused": "the run's `webhook` is not an http(s) URL, or its host is (or resolves "
    "to) a loopback, link-local or private address (THREADKEEPER_WEBHOOK_ALLOW_PRIVATE)",
    "not_implemented": "Threadkeeper does not serve this part of LangGraph's API",
    "invalid_tool_arguments": "edited tool arguments do not fit the tool's argument schema",
    "unprocessable": "the request is well-formed but cannot be processed",
}


@dataclass
class ErrorSpec(ResponseSpec):
    """A ResponseSpec that also names the ``error`` codes of its status."""

    codes: tuple[str, ...] = field(default=())


def describe(codes: Iterable[str]) -> str:
    return " / ".join(f"`{c}`: {MEANINGS.get(c, c)}" for c in codes)


def _pairs(kinds: Iterable[type[DomainError] | str]) -> list[tuple[int, str]]:
    codes = [kind if isinstance(kind, str) else kind.code for kind in kinds]
    return [(status_of(code), code) for code in codes]


def _group(pairs: Iterable[tuple[int, str]]) -> dict[int, tuple[str, ...]]:
    grouped: dict[int, list[str]] = {}
    for status, code in pairs:
        codes = grouped.setdefault(status, [])
        if code not in codes:
            codes.append(code)
    return {status: tuple(grouped[status]) for status in sorted(grouped)}


def errors(*kinds: type[DomainError] | str) -> dict[int, ResponseSpec]:
    """The refusals an operation's use case raises: domain error classes or codes, each at its
    one status (app/api/error_codes.py)."""
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
    stack = ["validation_error", "method_not_allowed", "request_timeout"]
    stack += ["request_header_too_large", "internal_error"]
    if _secured(handler):
        stack += ["unauthorized", "invalid_token", "rate_limited"]
        stack += ["database_unavailable", "database_not_migrated", "identity_provider_unavailable"]
    pairs = _pairs(stack)
    if _reads_body(handler):
        pairs += _pairs(["payload_too_large"])
    for status, spec in (getattr(handler, "responses", None) or {}).items():
        if isinstance(spec, ErrorSpec):
            pairs += [(status, code) for code in spec.codes]
    return _group(pairs)
