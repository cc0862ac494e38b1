"""What a client is told when a run fails: a stable code and a fixed message, never raw text.

Why: provider and database errors carry text the client must not see (a provider that echoes the
API key, internal host names, SQL). The run's ``error`` / ``error_code`` and its SSE ``status``
event carry only what is chosen here; the details go to the (redacted) server log, and for
provider errors only their shape (status, type), since a provider's message is not ours to trust.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
from langchain_core.exceptions import ModelError

from app.compression.overflow import is_context_overflow
from app.db.errors import is_connection_error, raised_in_modules
from app.db.run_events import RunError

_TOOL_MODULES = ("langgraph.prebuilt.tool_node", "langchain_core.tools", "app.agents.tools")


CONTEXT_OVERFLOW = RunError(
    "context_overflow",
    "The conversation does not fit the model's context window, even after compression.",
)
DATABASE_UNAVAILABLE = RunError(
    "database_unavailable", "The database could not be reached while the run was in progress."
)
TOOL_ERROR = RunError("tool_error", "A tool failed while the run was in progress.")
PROVIDER_ERROR = RunError(
    "provider_error", "The model provider returned an error; the server log has the details."
)
INTERNAL_ERROR = RunError("internal_error", "Internal error; the server log has the details.")
LEASE_EXPIRED = RunError("lease_expired", "lease expired: the worker running it stopped responding")
WORKER_STOPPED = RunError("worker_stopped", "worker stopped")
CANCELLED = RunError("cancelled", "cancelled by request")
AGENT_UNAVAILABLE = RunError(
    "agent_unavailable",
    "The thread's agent is not available in this deployment (removed from the agents file, "
    "or it could not start); GetAgent and the server log say why.",
)


def _is_provider_error(exc: BaseException) -> bool:
    return isinstance(exc, (openai.APIError, ModelError, httpx.HTTPError))


def classify_run_error(exc: BaseException) -> RunError:
    """The sanitized error of a failed run (first match: overflow, database, tool, provider)."""
    if is_context_overflow(exc):
        return CONTEXT_OVERFLOW
    if is_connection_error(exc):
        return DATABASE_UNAVAILABLE
    if raised_in_modules(exc.__traceback__, _TOOL_MODULES):
        return TOOL_ERROR
    if _is_provider_error(exc) or isinstance(exc.__cause__, (openai.APIError, ModelError)):
        return PROVIDER_ERROR
    return INTERNAL_ERROR


def error_log_fields(exc: BaseException) -> dict[str, Any]:
    """Fields to log about ``exc``: a provider error by its shape only (status, type, code),
    anything else in full (the log redaction processor still masks secrets in it).
    A provider's message can echo the API key or name internal hosts: it is not logged."""
    if _is_provider_error(exc):
        fields: dict[str, Any] = {"error_type": type(exc).__name__}
        status = getattr(exc, "status_code", None)
        if isinstance(status, int):
            fields["provider_status"] = status
        return fields
    return {"error": repr(exc)[:2000]}
