"""The LangGraph SDKs send ``X-Api-Key``; ``Authorization: Bearer`` works as on /v1."""

from __future__ import annotations

from typing import Any

from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException
from litestar.handlers.base import BaseRouteHandler

from app.api.auth import ApiKeyAuthority, api_key_guard
from app.domain.errors import ValidationFailed


async def langgraph_key_guard(
    connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler
) -> None:
    if connection.scope.get("method") == "OPTIONS":
        return  # a CORS preflight carries no credentials (see api_key_guard)
    keys = connection.headers.getall("x-api-key", [])
    if not keys:
        await api_key_guard(connection, handler)
        return
    if len(keys) > 1:
        raise ValidationFailed("send exactly one X-Api-Key header", field="X-Api-Key")
    authority: ApiKeyAuthority = connection.app.state.authority
    principal = authority.principal_for(f"Bearer {keys[0]}")
    if principal is None:
        raise NotAuthorizedException("missing or invalid API key")
    connection.state.principal = principal
