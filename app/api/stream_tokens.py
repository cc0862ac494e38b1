"""Stream tokens: how a browser's native ``EventSource`` (which cannot send headers) follows a
run without the API key ever appearing in a URL.

CreateStreamToken (authenticated with the API key as usual) answers a token that names one run
and its principal and expires after ``THREADKEEPER_STREAM_TOKEN_TTL_SECONDS``; StreamRunEvents
accepts it as ``?stream_token=`` in place of the ``Authorization`` header, for that run only, and
no other operation accepts it. The token is ``<payload>.<HMAC-SHA256 of payload>``, both
base64url: any API process with the same secret verifies it (no state, no database). The
secret is ``THREADKEEPER_STREAM_TOKEN_SECRET``, else derived from the configured API keys, so
rotating the keys also ends every token. A principal removed from the configuration loses its
tokens at once. A signed-in user's token (issued to a request authenticated with a JWT) says so;
it is accepted while sign-in stays on, until it expires, even if the JWT expired meanwhile. Checked when a stream (or a reconnect) starts; an open stream is not cut at
expiry. Python's ``hmac``/``hashlib`` suffice here: a JWT library would add a format and
algorithm negotiation the one verifier does not need.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import uuid
from collections.abc import Callable

import msgspec

#: The query parameter StreamRunEvents reads the token from.
QUERY_PARAMETER = "stream_token"


class _Claims(msgspec.Struct, array_like=True, frozen=True):
    run_id: str
    principal: str
    expires: int
    #: The principal came from a JWT (not one of the configured keys).
    signed_in: bool = False


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class StreamTokens:
    def __init__(
        self,
        secret: str,
        api_keys: dict[str, str],
        ttl_seconds: float,
        clock: Callable[[], float] = time.time,
        *,
        sign_in: bool = False,
    ) -> None:
        """``api_keys``: key -> principal (the configured ones); with no ``secret`` the signing
        key is derived from them. ``sign_in``: signed-in users' tokens are accepted."""
        material = secret or "\n".join(sorted(f"{p}:{k}" for k, p in api_keys.items()))
        self._key = hashlib.sha256(b"threadkeeper-stream-token\n" + material.encode()).digest()
        self._principals = frozenset(api_keys.values())
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._sign_in = sign_in

    def issue(
        self, run_id: uuid.UUID, principal: str, *, signed_in: bool = False
    ) -> tuple[str, int]:
        """The token and when it expires (Unix seconds)."""
        expires = int(self._clock() + self.ttl_seconds)
        claims = _Claims(str(run_id), principal, expires, signed_in)
        payload = _b64(msgspec.json.encode(claims))
        return f"{payload}.{self._sign(payload)}", expires

    def principal_for(self, token: str, run_id: uuid.UUID) -> str | None:
        """The principal a valid, unexpired token for ``run_id`` names, else None."""
        payload, dot, signature = token.partition(".")
        if not dot or not hmac.compare_digest(self._sign(payload), signature):
            return None
        try:
            claims = msgspec.json.decode(_unb64(payload), type=_Claims)
        except (ValueError, msgspec.DecodeError):
            return None
        if claims.run_id != str(run_id) or claims.expires <= self._clock():
            return None
        if claims.signed_in:
            return claims.principal if self._sign_in else None
        return claims.principal if claims.principal in self._principals else None

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())
