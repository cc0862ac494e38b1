"""What a client is told when a run fails: a stable code and a fixed message, never raw text.

Why: provider and database errors carry text the client must not see (a provider that echoes the
API key, internal host names, SQL). The run's ``error`` / ``error_code`` and its SSE ``status``
event carry only what is chosen here, and for a provider's failure its HTTP status and its own
error code (identifiers, never its text); the details go to the server log, redacted (the
provider's message with every configured secret, bearer token and key masked).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from app.agents.provider_errors import (
    is_provider_error,
    provider_code,
    provider_message,
    provider_status,
)
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
    "provider_error",
    "The model provider returned an error or could not be reached (provider_status and "
    "provider_code say which; the server log has the details).",
)
INTERNAL_ERROR = RunError("internal_error", "Internal error; the server log has the details.")
LEASE_EXPIRED = RunError("lease_expired", "lease expired: the worker running it stopped responding")
WORKER_STOPPED = RunError("worker_stopped", "worker stopped")
CANCELLED = RunError("cancelled", "cancelled by request")
#: An interrupted run ended by new input on its thread (``on_input_while_interrupted``).
SUPERSEDED = RunError("superseded", "cancelled: the user sent a new message instead")
AGENT_UNAVAILABLE = RunError(
    "agent_unavailable",
    "The thread's agent is not available in this deployment (removed from the agents file, "
    "or it could not start); GetAgent and the server log say why.",
)


GRAPH_ERROR = RunError(
    "graph_error",
    "The agent's graph raised an error while the run was in progress; the server log has "
    "the traceback.",
)


def classify_run_error(exc: BaseException, *, own_graph: bool = False) -> RunError:
    """The sanitized error of a failed run (first match: overflow, database, tool, provider;
    anything else is ``graph_error`` in a graph of the user's own, else ``internal_error``)."""
    if is_context_overflow(exc):
        return CONTEXT_OVERFLOW
    if is_connection_error(exc):
        return DATABASE_UNAVAILABLE
    if raised_in_modules(exc.__traceback__, _TOOL_MODULES):
        return TOOL_ERROR
    if is_provider_error(exc):
        return dataclasses.replace(
            PROVIDER_ERROR, provider_status=provider_status(exc), provider_code=provider_code(exc)
        )
    return GRAPH_ERROR if own_graph else INTERNAL_ERROR


def error_log_fields(exc: BaseException) -> dict[str, Any]:
    """Fields to log about ``exc``: a provider error by its status, code and message (the log's
    redaction masks the key, bearer tokens and every configured secret in it, even when the
    provider echoes them), anything else in full (redacted the same way)."""
    if is_provider_error(exc):
        return {
            "error_type": type(exc).__name__,
            "provider_status": provider_status(exc),
            "provider_code": provider_code(exc),
            "provider_message": provider_message(exc),
        }
    return {"error": repr(exc)[:2000]}
