"""The identity provider's signing keys (JWKS), fetched and cached per process.

PyJWT's ``PyJWKClient`` is not used for the fetching: it blocks on ``urllib`` (this service is
async), refetches on every unknown ``kid`` with no limit, and drops its keys when a refresh
fails. Parsing and verifying stay PyJWT's (``app/api/jwt_auth.py``); this module only decides
when to ask the identity provider, over httpx:

- the JWKS URL comes from ``<issuer>/.well-known/openid-configuration`` (whose ``issuer`` must
  be the configured one), unless ``THREADKEEPER_AUTH_JWT_JWKS_URL`` names it;
- keys are kept ``auth_jwt_jwks_cache_seconds``, then fetched again by the next token that
  needs them; an unknown ``kid`` also fetches them (a rotated key), at most once per
  ``auth_jwt_jwks_refresh_seconds``, so a flood of forged ``kid``s costs the IdP one request;
- a failed fetch keeps the keys already known (tokens they signed keep working) and is not
  retried before ``auth_jwt_jwks_refresh_seconds``; a token no known key can check is then
  answered 503 ``identity_provider_unavailable`` (fail closed: never accepted unchecked);
- a successful fetch replaces the set: a key the IdP removed stops working at once.
Concurrent requests share one fetch (a lock), never one each.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import structlog

from app import metrics
from app.config_signin import check_idp_url
from app.domain.errors import IdentityProviderUnavailable

log = structlog.get_logger(__name__)

#: Key types that can check an asymmetric signature; ``oct`` (shared secrets) never counts.
_KEY_TYPES = frozenset({"RSA", "EC", "OKP"})
#: A discovery document or JWKS larger than this is refused (an IdP's is a few KiB).
MAX_DOCUMENT_BYTES = 1_048_576


class JwksError(Exception):
    """The identity provider did not give usable keys (the reason, without secrets)."""


def usable_keys(document: Any) -> dict[str | None, dict[str, Any]]:
    """``kid`` -> JWK for the signing keys of a JWKS document. A key without ``kid`` is kept
    (under ``None``) only when it is the only one: nothing else could choose it."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise JwksError("the JWKS is not a JSON object with a keys list")
    keys: dict[str | None, dict[str, Any]] = {}
    anonymous: list[dict[str, Any]] = []
    for jwk in document["keys"]:
        if not isinstance(jwk, dict) or jwk.get("kty") not in _KEY_TYPES:
            continue
        if jwk.get("use", "sig") != "sig":  # an encryption key signs nothing
            continue
        kid = jwk.get("kid")
        if isinstance(kid, str) and kid:
            keys[kid] = jwk
        elif kid is None:
            anonymous.append(jwk)
    if len(anonymous) == 1 and not keys:
        keys[None] = anonymous[0]
    if not keys:
        raise JwksError("the JWKS holds no signing key")
    return keys


class JwksCache:
    def __init__(
        self,
        issuer: str,
        jwks_url: str = "",
        *,
        cache_seconds: float = 300.0,
        refresh_seconds: float = 30.0,
        timeout_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self.jwks_url = jwks_url
        self.cache_seconds = cache_seconds
        self.refresh_seconds = refresh_seconds
        self._timeout = timeout_seconds
        self._clock = clock
        self._keys: dict[str | None, dict[str, Any]] = {}
        self._fetched_at: float | None = None  # last successful fetch
        self._attempted_at: float | None = None  # last fetch, whatever its outcome
        self._failed = False  # the last fetch failed
        self._lock = asyncio.Lock()
        self._client: httpx.AsyncClient | None = None
        #: Bumped whenever the key set is replaced (the verifier's parsed keys follow it).
        self.generation = 0

    async def key_for(self, kid: str | None) -> dict[str, Any] | None:
        """The JWK that signed a token with this ``kid``; None when the IdP does not list it.
        A token without ``kid`` gets the only key, when there is only one.

        Raises ``IdentityProviderUnavailable`` when no known key has this ``kid`` and the keys
        could not be fetched (the last attempt failed)."""
        if not self._fresh() or self._lookup(kid) is None:
            async with self._lock:  # one fetch for every request waiting on it
                if self._due(kid):
                    await self._refresh()
        jwk = self._lookup(kid)
        if jwk is None and self._failed:
            raise IdentityProviderUnavailable()
        return jwk

    async def changed_since(self, generation: int) -> bool:
        """For a token without ``kid`` whose signature the only known key refused: fetch the
        keys again (within the same rate limit as an unknown ``kid``) and say whether they
        changed since ``generation`` (a rotation: check the token again)."""
        async with self._lock:
            if self.generation == generation and self._due(None, force=True):
                await self._refresh()
        if self.generation != generation:
            return True
        if self._failed:
            raise IdentityProviderUnavailable()
        return False

    def _lookup(self, kid: str | None) -> dict[str, Any] | None:
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        return self._keys.get(kid)

    def _fresh(self) -> bool:
        return self._fetched_at is not None and (
            self._clock() - self._fetched_at < self.cache_seconds
        )

    def _due(self, kid: str | None, *, force: bool = False) -> bool:
        """Whether this request should fetch (checked under the lock: a request that waited
        for another one's fetch finds it done and does not fetch again)."""
        if self._attempted_at is None:
            return True
        since = self._clock() - self._attempted_at
        if since < self.refresh_seconds:
            return False  # rate limit: unknown kids and retries after a failure
        return force or not self._fresh() or self._lookup(kid) is None

    async def _refresh(self) -> None:
        self._attempted_at = self._clock()
        try:
            keys = usable_keys(await self._get_json(await self._jwks_url()))
        except (JwksError, httpx.HTTPError) as exc:
            self._failed = True
            metrics.JWKS_FETCHES.labels("error").inc()
            log.warning(
                "jwks_fetch_failed",
                issuer=self.issuer,
                error=str(exc) if isinstance(exc, JwksError) else type(exc).__name__,
                keeping=len(self._keys),
            )
            return
        self._failed = False
        self._fetched_at = self._clock()
        if keys != self._keys:
            self._keys = keys
            self.generation += 1
            log.info("jwks_loaded", issuer=self.issuer, kids=sorted(k or "" for k in keys))
        metrics.JWKS_FETCHES.labels("ok").inc()

    async def _jwks_url(self) -> str:
        if self.jwks_url:
            return self.jwks_url
        url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        config = await self._get_json(url)
        if not isinstance(config, dict):
            raise JwksError("the openid-configuration is not a JSON object")
        if config.get("issuer") != self.issuer:
            # OpenID Connect Discovery 4.3: a document for another issuer is not this one's.
            raise JwksError(
                f"the openid-configuration names issuer {config.get('issuer')!r}, "
                f"not {self.issuer!r}"
            )
        jwks_uri = config.get("jwks_uri")
        if not isinstance(jwks_uri, str):
            raise JwksError("the openid-configuration has no jwks_uri")
        try:
            check_idp_url("jwks_uri", jwks_uri)
        except ValueError as exc:
            raise JwksError(str(exc)) from None
        return jwks_uri

    async def _get_json(self, url: str) -> Any:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._timeout, follow_redirects=False)
        async with self._client.stream(
            "GET", url, headers={"Accept": "application/json"}
        ) as response:
            if response.status_code != 200:
                raise JwksError(f"{url} answered HTTP {response.status_code}")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise JwksError(f"{url} answered more than {MAX_DOCUMENT_BYTES} bytes")
        try:
            return json.loads(bytes(body))
        except ValueError:
            raise JwksError(f"{url} did not answer JSON") from None

    async def warm(self) -> None:
        """Fetch the keys now (at start), so the first token does not wait; a failure is
        logged and retried by the first token that needs the keys."""
        async with self._lock:
            if self._attempted_at is None:
                await self._refresh()

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
