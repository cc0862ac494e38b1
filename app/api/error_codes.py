"""Every ``error`` code the service answers and its one HTTP status: the one map.

A client branches on the code alone: no code is answered with two statuses. Domain errors carry
only their code (``app/domain/errors.py``); the handlers (``app/api/errors.py``), the
declarations of each operation (``app/api/error_declarations.py``), the LangGraph door and the
HTTP server's own answers (``app/http_server.py``) all take the status from here. The OpenAPI
``ErrorCode`` enum (``app/api/schemas.py``) lists the same codes (tests/unit/test_error_codes.py).
"""

from __future__ import annotations

STATUS: dict[str, int] = {
    "validation_error": 400,
    "unauthorized": 401,
    "invalid_token": 401,
    "forbidden": 403,
    "not_found": 404,
    "checkpoint_not_found": 404,
    "method_not_allowed": 405,
    "request_timeout": 408,
    "conflict": 409,
    "thread_busy": 409,
    "invalid_state": 409,
    "request_not_queued": 409,
    "agent_unavailable": 409,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    # Well-formed but not processable: the LangGraph door's malformed requests (LangGraph's own
    # server answers them 422), and a framework 422.
    "unprocessable": 422,
    "nothing_to_compress": 422,
    "not_supported": 422,
    "webhook_refused": 422,
    "unknown_agent": 422,
    "agent_mismatch": 422,
    "idempotency_key_reused": 422,
    "checkpoint_not_forkable": 422,
    "invalid_tool_arguments": 422,
    "rate_limited": 429,
    "too_many_streams": 429,
    "request_header_too_large": 431,
    "internal_error": 500,
    "not_implemented": 501,
    "compression_failed": 502,
    "unavailable": 503,
    "database_unavailable": 503,
    "database_not_migrated": 503,
    "streams_unavailable": 503,
    "identity_provider_unavailable": 503,
    "workdir_unavailable": 507,
}

#: A framework error of a status no code above names (none is raised today): its status says
#: what it is. The one code without a fixed status.
HTTP_ERROR = "http_error"

#: The code of a framework ``HTTPException`` by its status (the reverse of ``STATUS`` where one
#: code stands for the status).
FRAMEWORK_CODES: dict[int, str] = {
    status: code
    for code, status in STATUS.items()
    if code
    in (
        "validation_error",
        "unauthorized",
        "forbidden",
        "not_found",
        "method_not_allowed",
        "conflict",
        "payload_too_large",
        "unsupported_media_type",
        "unprocessable",
        "rate_limited",
        "unavailable",
    )
}


def status_of(code: str) -> int:
    """The one status of ``code`` (``KeyError`` for a code not in the map: a bug)."""
    return STATUS[code]
