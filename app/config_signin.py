"""What the sign-in settings (``THREADKEEPER_AUTH_JWT_*``) mean: parsing and start-time checks.

Kept apart from ``app/config.py`` (which holds the fields, in ``AuthSettings``) so the rules of
one feature stay together; plain functions over the raw values, so config imports them.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

#: Asymmetric JWS algorithms PyJWT verifies against a JWKS. Symmetric ones (HS*) and ``none``
#: are never accepted: a JWKS publishes public keys, and an HMAC "signed" with a public key is
#: the classic key-confusion forgery.
ASYMMETRIC_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)

#: The default allow-list (every asymmetric algorithm above), as the setting spells it.
DEFAULT_ALGORITHMS = ",".join(ASYMMETRIC_ALGORITHMS)


def split_list(value: str) -> tuple[str, ...]:
    """``"a, b,,c"`` -> ``("a", "b", "c")``."""
    return tuple(item.strip() for item in value.split(",") if item.strip())


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_idp_url(name: str, url: str) -> None:
    """An identity-provider URL must be absolute ``https://`` (``http://`` only on loopback, for
    a local IdP): keys fetched in clear text could be swapped by anyone on the path."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host:
        raise ValueError(f"{name} must be an absolute https:// URL, got {url!r}")
    if parts.scheme == "http" and not _loopback(host):
        raise ValueError(f"{name} must use https:// (http:// is accepted only for a loopback host)")


def algorithms(value: str) -> tuple[str, ...]:
    """The allow-list; refuses symmetric algorithms, ``none`` and unknown names."""
    names = split_list(value)
    if not names:
        raise ValueError("THREADKEEPER_AUTH_JWT_ALGORITHMS must name at least one algorithm")
    unknown = [n for n in names if n not in ASYMMETRIC_ALGORITHMS]
    if unknown:
        raise ValueError(
            f"THREADKEEPER_AUTH_JWT_ALGORITHMS: {', '.join(unknown)} not accepted; use "
            f"asymmetric ones only ({DEFAULT_ALGORITHMS})"
        )
    return names


def required_claim(value: str) -> tuple[str, str] | None:
    """``"scope=threadkeeper"`` -> ``("scope", "threadkeeper")``; empty -> None."""
    if not value.strip():
        return None
    claim, sep, wanted = value.partition("=")
    if not sep or not claim.strip() or not wanted.strip():
        raise ValueError(
            "THREADKEEPER_AUTH_JWT_REQUIRED_CLAIM must look like claim=value "
            "(e.g. scope=threadkeeper or realm_access.roles=threadkeeper-user)"
        )
    return claim.strip(), wanted.strip()


def check(
    *,
    issuer: str,
    audience: str,
    jwks_url: str,
    algorithm_list: str,
    principal_claim: str,
    claim_rule: str,
    api_keys: dict[str, str],
    stream_token_secret: str,
) -> None:
    """Refuse, at start, sign-in settings that cannot work (each names its variable)."""
    if not issuer:
        if audience or jwks_url or claim_rule:
            raise ValueError(
                "THREADKEEPER_AUTH_JWT_AUDIENCE / _JWKS_URL / _REQUIRED_CLAIM need "
                "THREADKEEPER_AUTH_JWT_ISSUER (which turns sign-in with tokens on)"
            )
        return
    check_idp_url("THREADKEEPER_AUTH_JWT_ISSUER", issuer)
    if jwks_url:
        check_idp_url("THREADKEEPER_AUTH_JWT_JWKS_URL", jwks_url)
    if not split_list(audience):
        raise ValueError(
            "THREADKEEPER_AUTH_JWT_AUDIENCE is required with THREADKEEPER_AUTH_JWT_ISSUER: "
            "the audience (aud) your identity provider puts in tokens meant for Threadkeeper"
        )
    algorithms(algorithm_list)
    if not principal_claim.strip():
        raise ValueError("THREADKEEPER_AUTH_JWT_PRINCIPAL_CLAIM must name a claim (e.g. sub)")
    required_claim(claim_rule)
    if not api_keys and not stream_token_secret:
        # The stream-token key is otherwise derived from the API keys: with none, it would be
        # a constant anyone could compute.
        raise ValueError(
            "THREADKEEPER_STREAM_TOKEN_SECRET is required when sign-in with tokens is on and "
            "THREADKEEPER_API_KEYS is empty"
        )
