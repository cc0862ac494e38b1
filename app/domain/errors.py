"""Domain exceptions. Each carries a stable machine-readable code; its one HTTP status is in
app/api/error_codes.py (the one map), answered by app/api/errors.py.

They live below every layer, so the layer that decides a refusal raises it: a repository raises
``NotFound`` or ``ThreadBusy``, the compression core (``app/compression``) ``NothingToCompress`` or
``WorkdirUnavailable``, without importing the services that use them.
"""

from __future__ import annotations


class DomainError(Exception):
    code: str = "error"
    #: Seconds a client should wait before retrying (the ``Retry-After`` header), if any.
    retry_after: str | None = None

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail or self.code)
        self.detail = detail or self.code


class NothingToCompress(DomainError):
    """Manual compression refused: nothing could be offloaded or summarized (history too short
    or empty). ``tokens``: the view's size when the compressor measured it."""

    code = "nothing_to_compress"

    def __init__(self, detail: str = "", *, tokens: int | None = None) -> None:
        super().__init__(detail)
        self.tokens = tokens


class WorkdirUnavailable(DomainError):
    """Offloading was needed but the Workdir could not be written (full disk, read-only mount,
    blocked path). Nothing was shrunk or written. ``reason``: the first failure, without paths;
    ``failed``: how many results could not be offloaded."""

    code = "workdir_unavailable"

    def __init__(self, detail: str = "", *, reason: str = "", failed: int = 0) -> None:
        super().__init__(detail)
        self.reason = reason
        self.failed = failed


class UnknownAgent(DomainError):
    """CreateThread named an agent that is not registered (GET /v1/agents lists them)."""

    code = "unknown_agent"


class AgentUnavailable(DomainError):
    """The thread's agent is registered no more (removed from the agents file between restarts)
    or cannot run now (an MCP server that does not answer). ``reason`` says which;
    ``retry_after`` (seconds) when the agent is being started again."""

    code = "agent_unavailable"

    def __init__(
        self, detail: str = "", *, reason: str = "", retry_after: int | None = None
    ) -> None:
        super().__init__(detail)
        self.reason = reason or detail
        if retry_after is not None:
            self.retry_after = str(retry_after)


class AgentMismatch(DomainError):
    """A run named another agent (a LangGraph ``assistant_id``) than its thread's: a thread's
    agent is fixed where it was chosen (``conversations.agent_id``)."""

    code = "agent_mismatch"


class NotSupported(DomainError):
    """The thread's agent does not declare the capability the operation needs, or the request
    names a feature Threadkeeper does not do (``field``: which part of the request)."""

    code = "not_supported"

    def __init__(self, detail: str = "", *, field: str | None = None) -> None:
        super().__init__(detail)
        self.field = field


class WebhookRefused(DomainError):
    """A run's webhook URL is not http(s), or names an address the deployment does not let
    webhooks reach (loopback, link-local, private)."""

    code = "webhook_refused"


class NotFound(DomainError):
    code = "not_found"


class CheckpointNotFound(DomainError):
    """A checkpoint the thread does not have: unknown, pruned, or another thread's."""

    code = "checkpoint_not_found"


class CheckpointNotForkable(DomainError):
    """A run forks a thread only from a turn boundary: before a run's input, its input
    applied (what Regenerate re-runs), or a run's end."""

    code = "checkpoint_not_forkable"


class ThreadBusy(DomainError):
    """The thread has a running/interrupted run or queued input, or its lock is held."""

    code = "thread_busy"


class NotImplementedHere(DomainError):
    """A request the LangGraph surface understands but Threadkeeper does not do (e.g. branching from an
    older checkpoint, crons, the store)."""

    code = "not_implemented"


class AlreadyExists(DomainError):
    """A client-chosen id that is already taken (LangGraph ``if_exists: raise``)."""

    code = "conflict"


class InvalidState(DomainError):
    """The operation does not fit the resource's current state (e.g. resume a completed run)."""

    code = "invalid_state"


class RequestNotQueued(DomainError):
    """CancelRequest on a request a worker already dispatched (cancel its run instead)."""

    code = "request_not_queued"


class ValidationFailed(DomainError):
    code = "validation_error"

    def __init__(self, detail: str = "", *, field: str | None = None) -> None:
        super().__init__(detail)
        #: The input that failed (body field path, query parameter or header), when one did.
        self.field = field


class IdempotencyKeyReused(DomainError):
    """The Idempotency-Key was already used on this thread with a different body."""

    code = "idempotency_key_reused"


class InvalidToolArguments(DomainError):
    """Well-formed request, but edited tool arguments do not fit the tool's schema."""

    code = "invalid_tool_arguments"


class CompressionFailed(DomainError):
    """The summarizer failed; nothing was written."""

    code = "compression_failed"


class ServiceUnavailable(DomainError):
    code = "unavailable"


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


class TooManyStreams(DomainError):
    """The principal already holds as many open event streams and WaitRun long-polls (in this
    process) as it may; one must end first."""

    code = "too_many_streams"
    retry_after = "5"


class StreamsUnavailable(ServiceUnavailable):
    """This process follows as many runs as it can, or it is shutting down: the stream or
    long-poll is refused before it starts (never cut halfway). Retry, possibly elsewhere."""

    code = "streams_unavailable"
    retry_after = "5"


class InvalidToken(DomainError):
    """A bearer credential was sent and refused: no API key, and not a JWT this service accepts
    (expired, not yet valid, wrong issuer or audience, refused algorithm, unknown key, bad
    signature, missing principal...). Every such refusal is the same answer; the reason is only
    logged."""

    code = "invalid_token"

    def __init__(self, detail: str = "") -> None:
        super().__init__(
            detail
            or "the bearer token is not accepted: an unknown API key, or a token that is "
            "invalid, expired or not issued for this service"
        )


class IdentityProviderUnavailable(DomainError):
    """A token's signing key is not known yet and the identity provider's keys cannot be
    fetched right now: the token is neither accepted nor called invalid (fail closed)."""

    code = "identity_provider_unavailable"
    retry_after = "5"

    def __init__(self, detail: str = "") -> None:
        super().__init__(
            detail or "the identity provider's signing keys cannot be fetched right now; retry"
        )
