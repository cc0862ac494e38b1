"""The LangGraph door's credentials: ``Authorization: Bearer`` (an API key or a signed-in
user's JWT, exactly as on /v1) or ``X-Api-Key`` (an API key: what the LangGraph SDKs send).

When both are sent, ``Authorization`` decides: the SDKs fill ``X-Api-Key`` from environment
variables (``LANGGRAPH_API_KEY``, ``LANGSMITH_API_KEY``) on their own, so a browser app or
script that signs its user in with a token must not be refused because of one of those.
"""

from __future__ import annotations

from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from app.api.auth import Authenticator, api_key_guard
from app.domain.errors import ValidationFailed


async def langgraph_key_guard(
    connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler
) -> None:
    if connection.scope.get("method") == "OPTIONS":
        return  # a CORS preflight carries no credentials (see api_key_guard)
    keys = connection.headers.getall("x-api-key", [])
    if not keys or "authorization" in connection.headers:
        await api_key_guard(connection, handler)
        return
    if len(keys) > 1:
        raise ValidationFailed("send exactly one X-Api-Key header", field="X-Api-Key")
    authenticator: Authenticator = connection.app.state.authenticator
    await authenticator.authenticate(connection, keys[0], jwt_ok=False)
