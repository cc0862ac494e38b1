"""Domain exceptions. Each carries a stable machine-readable code; app/api/errors.py maps them to HTTP.

The base class and the errors the agent core raises live in ``app/errors.py``.
"""

from __future__ import annotations

from app.errors import DomainError


class NotFound(DomainError):
    code = "not_found"
    status_code = 404


class ThreadBusy(DomainError):
    """The thread has a running/interrupted run or queued input, or its lock is held."""

    code = "thread_busy"
    status_code = 409


class InvalidState(DomainError):
    """The operation does not fit the resource's current state (e.g. resume a completed run)."""

    code = "invalid_state"
    status_code = 409


class RequestNotQueued(DomainError):
    """CancelRequest on a request a worker already dispatched (cancel its run instead)."""

    code = "request_not_queued"
    status_code = 409


class ValidationFailed(DomainError):
    code = "validation_error"
    status_code = 400

    def __init__(self, detail: str = "", *, field: str | None = None) -> None:
        super().__init__(detail)
        #: The input that failed (body field path, query parameter or header), when one did.
        self.field = field


class IdempotencyKeyReused(DomainError):
    """The Idempotency-Key was already used on this thread with a different body."""

    code = "idempotency_key_reused"
    status_code = 422


class InvalidToolArguments(DomainError):
    """Well-formed request, but edited tool arguments do not fit the tool's schema."""

    code = "validation_error"
    status_code = 422


class NotSupported(DomainError):
    code = "not_supported"
    status_code = 422


class CompressionFailed(DomainError):
    """The summarizer failed; nothing was written."""

    code = "compression_failed"
    status_code = 502


class ServiceUnavailable(DomainError):
    code = "unavailable"
    status_code = 503


class SchemaNotMigrated(ServiceUnavailable):
    """The database answers but its schema is behind the code's (``python -m app migrate`` has
    not run yet): every query would fail on a missing table or column."""

    code = "database_not_migrated"

    def __init__(self, detail: str = "") -> None:
        super().__init__(
            detail
            or "the database schema is not migrated to this version yet "
            "(python -m app migrate); retry later"
        )


class DatabaseUnavailable(ServiceUnavailable):
    """The database could not be reached (connection refused, lost, or none free in time)."""

    code = "database_unavailable"

    def __init__(self, detail: str = "") -> None:
        super().__init__(
            detail or "the database is unreachable or the connection was lost; retry the request"
        )
