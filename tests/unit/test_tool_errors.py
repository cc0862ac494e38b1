"""What the model is told when a tool raises, and what is left to the worker's retry."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
from langchain.agents.middleware import ToolCallRequest

from app.agents.tools import tool_error_content


def request(name: str = "web_search") -> ToolCallRequest:
    call: Any = {"name": name, "args": {"query": "q"}, "id": "call_1", "type": "tool_call"}
    return ToolCallRequest(tool_call=call, tool=None, state={"messages": []}, runtime=None)  # type: ignore[arg-type]


def test_backend_failures_become_sanitized_messages() -> None:
    url = "http://search.internal:9200/search?key=sk-secret"
    resp = httpx.Response(503, request=httpx.Request("POST", url))
    error = httpx.HTTPStatusError(f"503 from {url}", request=resp.request, response=resp)
    text = tool_error_content(error, request())
    assert text is not None and "web_search tool failed (the backend answered HTTP 503)" in text
    assert "search.internal" not in text and "sk-secret" not in text
    text = tool_error_content(RuntimeError(f"boom at {url}"), request("query_kb"))
    assert text is not None and "query_kb tool failed (RuntimeError)" in text
    assert url not in text


def test_a_lost_database_connection_propagates_for_the_run_retry() -> None:
    assert (
        tool_error_content(psycopg.OperationalError("server closed"), request("query_kb")) is None
    )
