"""The outermost ASGI layer: request id, access log, HTTP metrics and the span's route name.

It wraps the whole Litestar handler (not a route middleware), so 404, 405, 413 and every error
response carry ``X-Request-ID`` and are counted too. The access log line names the principal
(set by the API key guard in the scope's state) and, for an error, its ``error`` code, read
from the JSON error body as it is sent (every error body is one small chunk).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import structlog
from opentelemetry import trace
from opentelemetry.semconv.attributes.http_attributes import HTTP_ROUTE

from app import metrics

log = structlog.get_logger("app.http")

ASGIApp = Any  # litestar's ASGIApp alias is a Protocol mypy cannot match to plain callables


def _request_id(scope: dict[str, Any]) -> str:
    for key, value in scope.get("headers") or []:
        if key == b"x-request-id":
            raw = value.decode("latin-1")[:100]
            if raw and raw.replace("-", "").isalnum():
                return raw
    return uuid.uuid4().hex


def _name_span(scope: Any) -> None:
    """Name the server span by the matched route template (set by routing) instead of the path."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    route = scope.get("path_template")
    method = str(scope.get("method", ""))
    if route:
        span.update_name(f"{method} {route}")
        span.set_attribute(HTTP_ROUTE, route)
    else:  # unknown path (404): the method alone, as the HTTP semantic conventions ask
        span.update_name(method)


def _error_code(body: bytes) -> str | None:
    """The ``error`` of an ``{"error", "detail"}`` body, else None."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    code = parsed.get("error") if isinstance(parsed, dict) else None
    return code if isinstance(code, str) else None


def observe_requests(app: ASGIApp) -> ASGIApp:
    """Bind a request id to every log line of the request, echo it, count and time the request."""

    async def middleware(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        request_id = _request_id(scope)
        structlog.contextvars.bind_contextvars(request_id=request_id)
        status = 500
        error_code: str | None = None
        json_error = False
        started = time.perf_counter()
        # Litestar keeps ``connection.state`` here; a server without lifespan state has none.
        state = scope.setdefault("state", {})

        async def send_with_id(message: Any) -> None:
            nonlocal status, error_code, json_error
            if message["type"] == "http.response.body" and json_error:
                json_error = False  # the first chunk only
                error_code = _error_code(message.get("body", b""))
            if message["type"] == "http.response.start":
                status = int(message["status"])
                json_error = status >= 400 and any(
                    k.lower() == b"content-type" and v.startswith(b"application/json")
                    for k, v in message.get("headers") or []
                )
                _name_span(scope)  # now: the server span ends with the last body chunk
                headers = [
                    (k, v) for k, v in message.get("headers") or [] if k.lower() != b"x-request-id"
                ]
                message["headers"] = [*headers, (b"x-request-id", request_id.encode())]
            await send(message)

        try:
            await app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            method = str(scope.get("method", ""))
            # The template, never the raw path: ids would explode the label set.
            route = str(scope.get("path_template") or "unmatched")
            metrics.HTTP_REQUESTS.labels(method, route, str(status)).inc()
            metrics.HTTP_LATENCY.labels(method, route).observe(elapsed)
            # Path only: query strings may carry user text; headers (keys) are never logged.
            log.info(
                "http_request",
                method=method,
                path=scope.get("path"),
                status=status,
                duration_ms=round(elapsed * 1000, 1),
                principal=state.get("principal"),
                error=error_code,
            )
            structlog.contextvars.unbind_contextvars("request_id")

    return middleware
