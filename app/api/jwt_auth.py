"""Bearer JWTs from the deployment's OIDC identity provider -> the principal that owns threads.

Every check is PyJWT's (JWS signature, ``exp``/``nbf``/``iat`` with leeway, ``iss``, ``aud``);
this module picks the key (``app/api/jwks.py``), pins the algorithm to the allow-list before
any key is touched (``alg: none`` and HS256-with-the-public-key never reach a verifier), and
maps the verified claims to a principal.

Refusals: ``TokenRefused(reason)``; the guard answers every one with the same 401
``invalid_token`` and logs only the reason. Their timing does not tell how close a forgery came:
a token refused before its signature is checked (unparsable, refused algorithm, unknown key)
still pays one signature check, against a decoy key of the same algorithm (made at start), so
garbage, a forged ``kid`` and a forged signature cost the same (benchmarks/sign_in.py measures
it). The one exception is an unknown ``kid`` that makes the keys be fetched again, at most once
per ``auth_jwt_jwks_refresh_seconds``, which reveals only what the public JWKS says anyway.
"""

from __future__ import annotations

import base64
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import get_default_algorithms

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


def _b64decode(part: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except ValueError:
        return b""


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
    """A key pair per allowed algorithm, so a refusal before the real signature check still
    pays one (``JwtVerifier._decoy_check``)."""

    def __init__(self, allowed: tuple[str, ...]) -> None:
        by_name = get_default_algorithms()
        rsa_key = None
        self._keys: dict[str, tuple[Any, Any, bytes]] = {}  # alg -> (algorithm, key, signature)
        for alg in allowed:
            algorithm = by_name[alg]
            private: Any
            if alg.startswith(("RS", "PS")):
                rsa_key = rsa_key or rsa.generate_private_key(public_exponent=65537, key_size=2048)
                private = rsa_key
            elif alg.startswith("ES"):
                curves = {"ES256": ec.SECP256R1(), "ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}
                private = ec.generate_private_key(curves[alg])
            else:
                private = ed25519.Ed25519PrivateKey.generate()
            signature = algorithm.sign(b"decoy", private)
            self._keys[alg] = (algorithm, private.public_key(), signature)
        self.default = allowed[0]

    def check(self, alg: str, signing_input: bytes, signature: bytes) -> None:
        algorithm, public, model = self._keys.get(alg) or self._keys[self.default]
        if len(signature) != len(model):
            signature = model  # a well-formed signature: the check runs to its end
        algorithm.verify(signing_input, public, signature)


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
        parts = token.split(".")
        signing_input = ".".join(parts[:2]).encode()
        signature = _b64decode(parts[2]) if len(parts) == 3 else b""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise self._refuse("malformed", None, signing_input, signature) from None
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or alg not in self.algorithms:
            raise self._refuse("algorithm_not_allowed", None, signing_input, signature)
        if kid is not None and not isinstance(kid, str):
            raise self._refuse("malformed", alg, signing_input, signature)
        for attempt in (1, 2):
            generation = self.keys.generation
            jwk = await self.keys.key_for(kid)
            if jwk is None:
                raise self._refuse("unknown_key", alg, signing_input, signature)
            key = self._key(kid, alg, jwk)
            if key is None:
                raise self._refuse("key_mismatch", alg, signing_input, signature)
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

    def _refuse(
        self, reason: str, alg: str | None, signing_input: bytes, signature: bytes
    ) -> TokenRefused:
        self._decoy.check(alg or self._decoy.default, signing_input, signature)
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
