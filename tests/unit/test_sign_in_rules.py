"""Issue 35, the rules without a network: sign-in settings refused at start, claim lookup, which
JWKS keys count, stream tokens of signed-in users, and the rate limiter's map staying bounded."""

from __future__ import annotations

import uuid

import pytest

from app.api.jwks import JwksError, usable_keys
from app.api.jwt_auth import claim_at, holds
from app.api.rate_limit import PRUNE_AT, RateLimiter
from app.api.stream_tokens import StreamTokens
from app.config import load_settings

ON = {"THREADKEEPER_AUTH_JWT_ISSUER": "https://idp.example.com/realms/acme"}


@pytest.mark.parametrize(
    ("env", "names"),
    [
        (ON, "THREADKEEPER_AUTH_JWT_AUDIENCE is required"),
        ({"THREADKEEPER_AUTH_JWT_AUDIENCE": "tk"}, "need THREADKEEPER_AUTH_JWT_ISSUER"),
        (
            {
                "THREADKEEPER_AUTH_JWT_ISSUER": "http://idp.example.com",
                "THREADKEEPER_AUTH_JWT_AUDIENCE": "tk",
            },
            "must use https://",
        ),
        (
            {
                **ON,
                "THREADKEEPER_AUTH_JWT_AUDIENCE": "tk",
                "THREADKEEPER_AUTH_JWT_ALGORITHMS": "RS256,HS256",
            },
            "HS256 not accepted",
        ),
        (
            {
                **ON,
                "THREADKEEPER_AUTH_JWT_AUDIENCE": "tk",
                "THREADKEEPER_AUTH_JWT_ALGORITHMS": "none",
            },
            "none not accepted",
        ),
        (
            {
                **ON,
                "THREADKEEPER_AUTH_JWT_AUDIENCE": "tk",
                "THREADKEEPER_AUTH_JWT_REQUIRED_CLAIM": "roles",
            },
            "claim=value",
        ),
        (
            {
                **ON,
                "THREADKEEPER_AUTH_JWT_AUDIENCE": "tk",
                "THREADKEEPER_AUTH_JWT_JWKS_URL": "ftp://x/jwks",
            },
            "JWKS_URL must be an absolute",
        ),
        (
            {
                **ON,
                "THREADKEEPER_AUTH_JWT_AUDIENCE": "tk",
                "THREADKEEPER_AUTH_JWT_LEEWAY_SECONDS": "-1",
            },
            "LEEWAY_SECONDS must be >= 0",
        ),
        # No API keys and no stream-token secret: the secret would be derived from nothing.
        (
            {**ON, "THREADKEEPER_AUTH_JWT_AUDIENCE": "tk", "THREADKEEPER_API_KEYS": ""},
            "STREAM_TOKEN_SECRET is required",
        ),
    ],
)
def test_settings_that_cannot_work_are_refused_at_start(env: dict[str, str], names: str) -> None:
    with pytest.raises(ValueError, match=names):
        load_settings(env)


def test_settings_that_work() -> None:
    auth = load_settings(
        {
            **ON,
            "THREADKEEPER_AUTH_JWT_AUDIENCE": "tk, account",
            "THREADKEEPER_AUTH_JWT_ALGORITHMS": "ES256,EdDSA",
            "THREADKEEPER_AUTH_JWT_REQUIRED_CLAIM": "realm_access.roles=tk-user",
            "THREADKEEPER_API_KEYS": "",
            "THREADKEEPER_STREAM_TOKEN_SECRET": "s3cret",
        }
    ).auth
    assert auth.sign_in
    assert not load_settings({}).auth.sign_in
    local = {
        "THREADKEEPER_AUTH_JWT_ISSUER": "http://127.0.0.1:9400",
        "THREADKEEPER_AUTH_JWT_AUDIENCE": "tk",
    }
    assert load_settings(local).auth.sign_in  # http:// only for a loopback IdP


def test_claims_by_name_then_by_path() -> None:
    claims = {
        "sub": "u1",
        "https://example.com/roles": ["admin"],
        "cognito:groups": ["tk"],
        "realm_access": {"roles": ["tk-user", "offline"]},
        "scope": "openid threadkeeper email",
        "scp": ["threadkeeper"],
    }
    assert claim_at(claims, "https://example.com/roles") == ["admin"]  # dots in a claim name
    assert claim_at(claims, "realm_access.roles") == ["tk-user", "offline"]
    assert claim_at(claims, "realm_access.missing") is None
    assert claim_at(claims, "sub.x") is None
    assert holds(claims["scope"], "threadkeeper") and not holds(claims["scope"], "thread")
    assert holds(claims["scp"], "threadkeeper") and holds("tk", "tk")
    assert not holds({"threadkeeper": True}, "threadkeeper") and not holds(None, "x")


def test_only_signing_keys_count() -> None:
    rsa = {"kty": "RSA", "kid": "a", "n": "x", "e": "AQAB"}
    keys = usable_keys(
        {
            "keys": [
                rsa,
                {"kty": "oct", "kid": "shared", "k": "c2VjcmV0"},  # a shared secret: never
                {"kty": "RSA", "kid": "enc", "use": "enc", "n": "x", "e": "AQAB"},
                {"kty": "EC", "kid": "b", "use": "sig", "crv": "P-256", "x": "x", "y": "y"},
                "not a key",
            ]
        }
    )
    assert sorted(k or "" for k in keys) == ["a", "b"]
    assert usable_keys({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "x"}]}).keys() == {None}
    for bad in ({}, {"keys": "x"}, {"keys": [{"kty": "oct", "k": "x"}]}, []):
        with pytest.raises(JwksError):
            usable_keys(bad)


def test_stream_tokens_of_signed_in_users() -> None:
    run = uuid.uuid4()
    keys = {"key-a": "alice"}
    on = StreamTokens("secret", keys, 60, sign_in=True)
    off = StreamTokens("secret", keys, 60, sign_in=False)
    token, _ = on.issue(run, "carol", signed_in=True)
    assert on.principal_for(token, run) == "carol"
    assert off.principal_for(token, run) is None  # sign-in turned off: its users' tokens end
    # A key principal's token is unchanged; "carol" without the mark is no key principal.
    assert off.principal_for(on.issue(run, "alice")[0], run) == "alice"
    assert on.principal_for(on.issue(run, "carol")[0], run) is None


def test_the_rate_limiters_map_drops_idle_principals() -> None:
    now = [0.0]
    limiter = RateLimiter(10, 5, clock=lambda: now[0])
    for i in range(PRUNE_AT):
        assert limiter.retry_after(f"user-{i}") == 0
    busy = "user-0"
    for _ in range(4):
        limiter.retry_after(busy)  # drained: not idle
    now[0] += 0.1  # a little refill, not enough to be full again for user-0
    limiter.retry_after("newcomer")
    assert len(limiter) == 2  # user-0 (still refilling) and the newcomer
    assert limiter.retry_after(busy) == 0 and limiter.retry_after(busy) >= 1
