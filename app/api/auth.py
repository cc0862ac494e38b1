"""Who is calling: a bearer API key (a service account) or a JWT from the deployment's OIDC
identity provider (a signed-in user; ``app/api/jwt_auth.py``). Both name a principal, and a
principal owns threads the same way whichever way it came in.

Keys are compared by SHA-256 digest in constant time. A bearer credential that is not a key is
checked as a JWT when sign-in is on. No credential: 401 ``unauthorized``; a credential refused:
401 ``invalid_token`` (``WWW-Authenticate: Bearer error="invalid_token"``), the same answer for
every reason, which is logged (never the token) and counted."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import re
import time
import uuid
from typing import Any, NoReturn

import structlog
from litestar import Request
from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException
from litestar.handlers.base import BaseRouteHandler

from app import metrics
from app.api.jwks import JwksCache
from app.api.jwt_auth import JwtVerifier, TokenRefused
from app.api.stream_tokens import QUERY_PARAMETER, StreamTokens
from app.config import AuthSettings
from app.domain.errors import InvalidToken, ValidationFailed

log = structlog.get_logger(__name__)

#: Exactly ``Bearer <token>``: the scheme (case-insensitive, RFC 9110), ONE ASCII space and a
#: token of visible ASCII. No tabs, no double spaces, no trailing NBSP silently stripped.
BEARER = re.compile(r"Bearer ([\x21-\x7e]+)", re.ASCII | re.IGNORECASE)


class ApiKeyAuthority:
    def __init__(self, key_to_principal: dict[str, str]) -> None:
        self._digests = [
            (hashlib.sha256(key.encode()).digest(), principal)
            for key, principal in key_to_principal.items()
        ]

    @property
    def principals(self) -> frozenset[str]:
        return frozenset(principal for _, principal in self._digests)

    def principal_for(self, header: str | None) -> str | None:
        match = BEARER.fullmatch(header or "")
        if match is None:
            return None
        return self.principal_of_key(match.group(1))

    def principal_of_key(self, key: str) -> str | None:
        digest = hashlib.sha256(key.encode()).digest()
        found: str | None = None
        for candidate, principal in self._digests:
            # No early exit: every key is compared, so timing does not reveal which one matched.
            if hmac.compare_digest(candidate, digest):
                found = principal
        return found


class Authenticator:
    """Both kinds of bearer credential, for both doors."""

    def __init__(self, keys: ApiKeyAuthority, tokens: JwtVerifier | None = None) -> None:
        self.keys = keys
        self.tokens = tokens
        self._warming: asyncio.Task[None] | None = None

    @classmethod
    def from_settings(cls, settings: AuthSettings) -> Authenticator:
        keys = ApiKeyAuthority(settings.api_key_map())
        if not settings.sign_in:
            return cls(keys)
        jwks = JwksCache(
            settings.auth_jwt_issuer,
            settings.auth_jwt_jwks_url,
            cache_seconds=settings.auth_jwt_jwks_cache_seconds,
            refresh_seconds=settings.auth_jwt_jwks_refresh_seconds,
            timeout_seconds=settings.auth_jwt_timeout_seconds,
        )
        return cls(keys, JwtVerifier(settings, jwks, keys.principals))

    def start(self) -> None:
        """Fetch the identity provider's keys in the background (the first token need not
        wait, and a wrong issuer is logged at start rather than at the first sign-in)."""
        if self.tokens is not None and self._warming is None:
            self._warming = asyncio.create_task(self.tokens.keys.warm(), name="jwks-warm")

    async def close(self) -> None:
        if self._warming is not None:
            self._warming.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._warming
        if self.tokens is not None:
            await self.tokens.keys.close()

    async def authenticate(
        self, connection: ASGIConnection[Any, Any, Any, Any], credential: str, *, jwt_ok: bool
    ) -> None:
        """Sets ``connection.state.principal`` (and ``signed_in``) or raises ``InvalidToken``
        (or ``IdentityProviderUnavailable`` from the key fetch). ``jwt_ok``: the header may
        carry a JWT (``Authorization``; ``X-Api-Key`` is for keys only)."""
        started = time.monotonic()
        principal = self.keys.principal_of_key(credential)
        if principal is not None:
            connection.state.principal = principal
            connection.state.signed_in = False
            return
        if self.tokens is None or not jwt_ok:
            await _refused(connection, "unknown_api_key", started)
        assert self.tokens is not None
        try:
            principal = await self.tokens.principal_for(credential)
        except TokenRefused as refused:
            await _refused(connection, refused.reason, started)
        connection.state.principal = principal
        connection.state.signed_in = True


#: No refusal is answered sooner than this after the check began. The checks themselves take
#: about 0.1 ms and differ by tens of microseconds by how far a forgery got (benchmarks/
#: sign_in.py); waiting to a common floor leaves nothing of that in the answer's timing.
REFUSAL_FLOOR_SECONDS = 0.002


async def _refused(
    connection: ASGIConnection[Any, Any, Any, Any], reason: str, started: float
) -> NoReturn:
    metrics.AUTH_REFUSALS.labels(reason).inc()
    log.info("auth_refused", reason=reason, path=connection.url.path)
    await asyncio.sleep(max(0.0, started + REFUSAL_FLOOR_SECONDS - time.monotonic()))
    raise InvalidToken()


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
        _stream_token_principal(connection)
        return
    match = BEARER.fullmatch(credentials[0]) if credentials else None
    if match is None:
        raise NotAuthorizedException("send Authorization: Bearer <API key or token>")
    authenticator: Authenticator = connection.app.state.authenticator
    await authenticator.authenticate(connection, match.group(1), jwt_ok=True)


#: The 401 detail for a /v1 request that carries only ``X-Api-Key``.
X_API_KEY_HINT = (
    "send Authorization: Bearer <API key or token>: /v1 does not read X-Api-Key "
    "(only the LangGraph API does)"
)


def _stream_token_principal(connection: ASGIConnection[Any, Any, Any, Any]) -> None:
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
    connection.state.principal = principal


async def provide_principal(request: Request[Any, Any, Any]) -> str:
    return principal_of(request)


def principal_of(request: Request[Any, Any, Any]) -> str:
    """The principal ``api_key_guard`` authenticated, read without dependency injection: a
    handler with two injected dependencies pays for a task group per request (Litestar resolves
    a batch of them concurrently), a tenth of PostMessage's CPU."""
    return str(request.state.principal)


def signed_in(request: Request[Any, Any, Any]) -> bool:
    """The principal came from a JWT (a signed-in user), not from an API key."""
    return bool(getattr(request.state, "signed_in", False))
