"""Which stable code a failed run gets, from real exception objects (issue 10, items 1-2)."""

from __future__ import annotations

import httpx
import openai
import psycopg
import pytest
from langchain_core.tools import tool

from app.db.errors import is_connection_error
from app.log_redaction import redact_text
from app.worker.errors import classify_run_error, error_log_fields

SECRET = "sk-live-0123456789abcdef"


def _provider_error(status: int, body: dict[str, object]) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://llm.internal/v1/chat/completions")
    response = httpx.Response(status, json=body, request=request)
    cls = openai.AuthenticationError if status == 401 else openai.BadRequestError
    return cls(f"Error code: {status} - {body}", response=response, body=body)


def test_provider_errors_are_coded_and_logged_with_the_message_masked() -> None:
    exc = _provider_error(401, {"error": {"message": f"bad key {SECRET}", "code": "bad_key"}})
    error = classify_run_error(exc)
    assert (error.code, error.provider_status, error.provider_code) == (
        "provider_error",
        401,
        "bad_key",
    )
    fields = error_log_fields(exc)
    assert fields == {
        "error_type": "AuthenticationError",
        "provider_status": 401,
        "provider_code": "bad_key",
        "provider_message": f"bad key {SECRET}",
    }
    # The log's redaction masks a key-shaped value wherever it hides.
    assert redact_text(fields["provider_message"]) == "bad key [redacted]"
    assert SECRET not in error.message


def test_a_provider_code_is_an_identifier_never_prose() -> None:
    exc = _provider_error(400, {"error": {"message": "no", "code": "you sent sk-live-xyz, bad"}})
    assert classify_run_error(exc).provider_code is None


def test_context_overflow_wins_over_provider_error() -> None:
    body = {"error": {"message": "maximum context length", "code": "context_length_exceeded"}}
    assert classify_run_error(_provider_error(400, body)).code == "context_overflow"


def test_database_connection_errors_and_only_those() -> None:
    lost = psycopg.OperationalError("server closed the connection unexpectedly")
    assert is_connection_error(lost)
    assert classify_run_error(lost).code == "database_unavailable"
    wrapped = RuntimeError("graph step failed")
    wrapped.__cause__ = lost
    assert is_connection_error(wrapped)
    # A lock timeout is an OperationalError too, but the database answered.
    assert not is_connection_error(psycopg.errors.LockNotAvailable("lock timeout"))
    # An OSError that no driver raised (a full disk, say) is not an outage.
    assert not is_connection_error(OSError(28, "No space left on device"))
    assert classify_run_error(OSError(28, "No space left on device")).code == "internal_error"


async def test_an_exception_raised_inside_a_tool_is_a_tool_error() -> None:
    @tool
    def lookup(query: str) -> str:
        """Look something up."""
        raise RuntimeError(f"backend at search.internal refused {query}")

    with pytest.raises(RuntimeError) as raised:
        await lookup.ainvoke({"query": "x"})
    assert classify_run_error(raised.value).code == "tool_error"
