"""Bearer JWTs from the deployment's OIDC identity provider -> the principal that owns threads.

Every check is PyJWT's (JWS signature, ``exp``/``nbf``/``iat`` with leeway, ``iss``, ``aud``);
this module picks the key (``app/api/jwks.py``), pins the algorithm to the allow-list before
any key is touched (``alg: none`` and HS256-with-the-public-key never reach a verifier), and
maps the verified claims to a principal.

Refusals: ``TokenRefused(reason)``; the guard answers every one with the same 401
``invalid_token`` and logs only the reason. Their timing does not tell how close a forgery came:
a token refused before its signature is checked (unparsable, refused algorithm, unknown key)
still runs one PyJWT decode with a signature check, on a spoiled decoy token of the same
algorithm (made at start), so the CPU work is alike; and the guard answers no refusal sooner
than ``REFUSAL_FLOOR_SECONDS`` after the check began (``app/api/auth.py``), so the wall time is
alike too (benchmarks/sign_in.py measures both). The one exception is an unknown ``kid`` that
makes the keys be fetched again, at most once per ``auth_jwt_jwks_refresh_seconds``, which
reveals only what the public JWKS says anyway.
"""

from __future__ import annotations

import contextlib
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from app.api.jwks import JwksCache
from app.config import AuthSettings
from app.config_signin import algorithms, required_claim, split_list

#: The longest principal a token may name (``conversations.owner_id`` is ``String(200)``).
MAX_PRINCIPAL = 200

#: PyJWT's refusal -> our reason (the most specific class first).
_REASONS: tuple[tuple[type[Exception], str], ...] = (
    (jwt.ExpiredSignatureError, "expired"),
    (jwt.ImmatureSignatureError, "not_yet_valid"),
    (jwt.InvalidIssuerError, "wrong_issuer"),
    (jwt.InvalidAudienceError, "wrong_audience"),
    (jwt.MissingRequiredClaimError, "missing_claim"),
    (jwt.InvalidSignatureError, "bad_signature"),
    (jwt.InvalidAlgorithmError, "algorithm_not_allowed"),
    (jwt.InvalidKeyError, "key_mismatch"),
    (jwt.DecodeError, "malformed"),
)


class TokenRefused(Exception):
    """A JWT that is not accepted; ``reason`` is for the log and the metric only."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def claim_at(claims: dict[str, Any], path: str) -> Any:
    """A claim by name (``email``, ``https://example.com/roles``, ``cognito:groups``), else by
    a dotted path into nested objects (``realm_access.roles``); None when absent."""
    if path in claims:
        return claims[path]
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def holds(value: Any, wanted: str) -> bool:
    """A claim value carries ``wanted``: equal to it, a list holding it, or a space-separated
    string (OAuth ``scope``) naming it."""
    if isinstance(value, str):
        return value == wanted or wanted in value.split(" ")
    if isinstance(value, list):
        return wanted in value
    return False


class _Decoy:
    """A key pair per allowed algorithm and a token it signed, spoiled: a refusal before the real
    signature check runs the same PyJWT decode (parse, signature check that fails) on it."""

    def __init__(self, allowed: tuple[str, ...]) -> None:
        rsa_key = None
        self._tokens: dict[str, tuple[str, Any]] = {}  # alg -> (spoiled token, public key)
        claims = {"iss": "decoy", "aud": "decoy", "sub": "decoy" * 8, "exp": 2**40, "iat": 0}
        for alg in allowed:
            private: Any
            if alg.startswith(("RS", "PS")):
                rsa_key = rsa_key or rsa.generate_private_key(public_exponent=65537, key_size=2048)
                private = rsa_key
            elif alg.startswith("ES"):
                curves = {"ES256": ec.SECP256R1(), "ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}
                private = ec.generate_private_key(curves[alg])
            else:
                private = ed25519.Ed25519PrivateKey.generate()
            token = jwt.encode(claims, private, alg, headers={"kid": "decoy"})
            head, body, signature = token.split(".")
            spoiled = signature[:-4] + ("AAAA" if not signature.endswith("AAAA") else "BBBB")
            self._tokens[alg] = (f"{head}.{body}.{spoiled}", private.public_key())
        self.default = allowed[0]

    def check(self, alg: str) -> None:
        token, public = self._tokens.get(alg) or self._tokens[self.default]
        with contextlib.suppress(jwt.PyJWTError):
            jwt.decode(token, public, algorithms=[alg if alg in self._tokens else self.default])


class JwtVerifier:
    def __init__(
        self, settings: AuthSettings, keys: JwksCache, reserved_principals: frozenset[str]
    ) -> None:
        """``reserved_principals``: the API keys' principals. A token naming one is refused,
        so no account at the identity provider can take over a service account's threads."""
        self.keys = keys
        self.issuer = settings.auth_jwt_issuer
        self.audiences = list(split_list(settings.auth_jwt_audience))
        self.algorithms = algorithms(settings.auth_jwt_algorithms)
        self.leeway = settings.auth_jwt_leeway_seconds
        self.principal_claim = settings.auth_jwt_principal_claim.strip()
        self.required = required_claim(settings.auth_jwt_required_claim)
        self.reserved = reserved_principals
        self._decoy = _Decoy(self.algorithms)
        self._parsed: dict[tuple[str | None, str], jwt.PyJWK] = {}
        self._generation = -1

    async def principal_for(self, token: str) -> str:
        """The principal of a valid token. Raises ``TokenRefused``, or
        ``IdentityProviderUnavailable`` when its key cannot be known right now."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise self._refuse("malformed", None) from None
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or alg not in self.algorithms:
            raise self._refuse("algorithm_not_allowed", None)
        if kid is not None and not isinstance(kid, str):
            raise self._refuse("malformed", alg)
        for attempt in (1, 2):
            generation = self.keys.generation
            jwk = await self.keys.key_for(kid)
            if jwk is None:
                raise self._refuse("unknown_key", alg)
            key = self._key(kid, alg, jwk)
            if key is None:
                raise self._refuse("key_mismatch", alg)
            try:
                claims = jwt.decode(
                    token,
                    key,
                    algorithms=[alg],
                    audience=self.audiences,
                    issuer=self.issuer,
                    leeway=self.leeway,
                    options={"require": ["exp", "iss", "aud"], "enforce_minimum_key_length": True},
                )
            except jwt.InvalidSignatureError:
                # No kid names the key: after a rotation the only cached key is the old one.
                if kid is None and attempt == 1 and await self.keys.changed_since(generation):
                    continue
                raise TokenRefused("bad_signature") from None
            except jwt.PyJWTError as exc:
                raise TokenRefused(_reason(exc)) from None
            return self._principal(claims)
        raise TokenRefused("bad_signature")  # pragma: no cover - the loop returns or raises

    def _refuse(self, reason: str, alg: str | None) -> TokenRefused:
        self._decoy.check(alg or self._decoy.default)
        return TokenRefused(reason)

    def _key(self, kid: str | None, alg: str, jwk: dict[str, Any]) -> jwt.PyJWK | None:
        """The JWK parsed for ``alg`` (kept until the key set changes); None when the key
        cannot sign with ``alg`` (another key type or curve, or the JWK names another alg)."""
        if self._generation != self.keys.generation:
            self._parsed.clear()
            self._generation = self.keys.generation
        cached = self._parsed.get((kid, alg))
        if cached is not None:
            return cached
        if jwk.get("alg", alg) != alg:
            return None
        try:
            parsed = jwt.PyJWK(jwk, algorithm=alg)
        except jwt.PyJWTError:
            return None
        self._parsed[(kid, alg)] = parsed
        return parsed

    def _principal(self, claims: dict[str, Any]) -> str:
        principal = claim_at(claims, self.principal_claim)
        if not isinstance(principal, str) or not principal:
            raise TokenRefused("missing_principal")
        if len(principal) > MAX_PRINCIPAL or not principal.isprintable():
            raise TokenRefused("invalid_principal")
        if self.principal_claim == "email" and claims.get("email_verified") is False:
            # An address the IdP has not verified could be anybody's.
            raise TokenRefused("email_not_verified")
        if self.required is not None and not holds(
            claim_at(claims, self.required[0]), self.required[1]
        ):
            raise TokenRefused("missing_required_claim")
        if principal in self.reserved:
            raise TokenRefused("principal_reserved")
        return principal


def _reason(exc: Exception) -> str:
    for kind, reason in _REASONS:
        if isinstance(exc, kind):
            return reason
    return "invalid"
