"""Bearer API keys. Keys are compared by SHA-256 digest in constant time; the key names a principal."""

from __future__ import annotations

import hashlib
import hmac
import re
import uuid
from typing import Any

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException
from litestar.handlers.base import BaseRouteHandler

from app.api.stream_tokens import QUERY_PARAMETER, StreamTokens
from app.domain.errors import ValidationFailed

#: Exactly ``Bearer <token>``: the scheme (case-insensitive, RFC 9110), ONE ASCII space and a
#: token of visible ASCII. No tabs, no double spaces, no trailing NBSP silently stripped.
BEARER = re.compile(r"Bearer ([\x21-\x7e]+)", re.ASCII | re.IGNORECASE)


class ApiKeyAuthority:
    def __init__(self, key_to_principal: dict[str, str]) -> None:
        self._digests = [
            (hashlib.sha256(key.encode()).digest(), principal)
            for key, principal in key_to_principal.items()
        ]

    def principal_for(self, header: str | None) -> str | None:
        match = BEARER.fullmatch(header or "")
        if match is None:
            return None
        digest = hashlib.sha256(match.group(1).encode()).digest()
        found: str | None = None
        for candidate, principal in self._digests:
            # No early exit: every key is compared, so timing does not reveal which one matched.
            if hmac.compare_digest(candidate, digest):
                found = principal
        return found


#: Route ``opt`` flag: the route also accepts a stream token instead of the API key.
STREAM_TOKEN_OPT = "stream_token"


async def api_key_guard(
    connection: ASGIConnection[Any, Any, Any, Any], route: BaseRouteHandler
) -> None:
    if connection.scope.get("method") == "OPTIONS":
        # A CORS preflight carries no credentials by design; it only learns the allowed
        # methods (no handler runs and no data is returned), so it must not be refused.
        return
    credentials = connection.headers.getall("authorization", [])
    if len(credentials) > 1:
        # Not a list-valued field (RFC 9110): a proxy and a client that each added one would
        # otherwise be decided by header order, which neither of them controls.
        raise ValidationFailed("send exactly one Authorization header", field="Authorization")
    # The LangGraph door's header sent to /v1: say where the key goes (whatever the key, so
    # the hint tells nothing about it). A stream token still works beside it.
    streams = route.opt.get(STREAM_TOKEN_OPT) and QUERY_PARAMETER in connection.query_params
    if not credentials and not streams and "x-api-key" in connection.headers:
        raise NotAuthorizedException(X_API_KEY_HINT)
    if not credentials and route.opt.get(STREAM_TOKEN_OPT):
        connection.state.principal = _stream_token_principal(connection)
        return
    authority: ApiKeyAuthority = connection.app.state.authority
    principal = authority.principal_for(credentials[0] if credentials else None)
    if principal is None:
        raise NotAuthorizedException("missing or invalid API key")
    connection.state.principal = principal


#: The 401 detail for a /v1 request that carries only ``X-Api-Key``.
X_API_KEY_HINT = (
    "missing API key: /v1 takes it as 'Authorization: Bearer <key>' "
    "(X-Api-Key is only read by the LangGraph API)"
)


def _stream_token_principal(connection: ASGIConnection[Any, Any, Any, Any]) -> str:
    """The principal of a ``?stream_token=`` valid for this run (app/api/stream_tokens.py)."""
    tokens: StreamTokens = connection.app.state.stream_tokens
    token = connection.query_params.get(QUERY_PARAMETER)
    try:  # the path parameter is validated (400) only after the guards
        run_id = uuid.UUID(str(connection.path_params.get("run_id")))
    except ValueError:
        run_id = None
    principal = tokens.principal_for(token, run_id) if token and run_id is not None else None
    if principal is None:
        raise NotAuthorizedException("missing API key, or a stream token invalid for this run")
    return principal


async def provide_principal(request: Request[Any, Any, Any]) -> str:
    return principal_of(request)


def principal_of(request: Request[Any, Any, Any]) -> str:
    """The principal ``api_key_guard`` authenticated, read without dependency injection: a
    handler with two injected dependencies pays for a task group per request (Litestar resolves
    a batch of them concurrently), a tenth of PostMessage's CPU."""
    return str(request.state.principal)
