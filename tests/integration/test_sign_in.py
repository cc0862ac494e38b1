"""Issue 35: bearer JWTs from a real OpenID Connect provider process (tests/support/oidc_provider.py)
on every /v1 route and on the LangGraph door, owning threads exactly like a key's principal, and
the forged-token matrix: every refusal the same 401 ``invalid_token``, the reason only counted
and logged."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from prometheus_client import REGISTRY

from app.domain.errors import InvalidToken
from tests.conftest import AUTH, OTHER_AUTH, AppFactory
from tests.support.api import BODIES, concrete_path, openapi_operations
from tests.support.oidc_provider import IdentityProvider, running_idp
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

INVALID_TOKEN = 'Bearer error="invalid_token"'
DETAIL = InvalidToken().detail


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def refusals(reason: str) -> float:
    return REGISTRY.get_sample_value("threadkeeper_auth_refusals_total", {"reason": reason}) or 0


def jwks_fetches(outcome: str) -> float:
    return REGISTRY.get_sample_value("threadkeeper_jwks_fetches_total", {"outcome": outcome}) or 0


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def segments(token: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    header, payload, signature = token.split(".")
    pad = lambda s: s + "=" * (-len(s) % 4)  # noqa: E731
    return (
        json.loads(base64.urlsafe_b64decode(pad(header))),
        json.loads(base64.urlsafe_b64decode(pad(payload))),
        signature,
    )


def unsigned(header: dict[str, Any], payload: dict[str, Any], signature: str = "") -> str:
    return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}.{signature}"


def assert_invalid_token(resp: httpx.Response, token: str, what: str) -> None:
    assert resp.status_code == 401, (what, resp.status_code, resp.text)
    assert resp.headers["www-authenticate"] == INVALID_TOKEN, what
    body = resp.json()
    assert body["error"] == "invalid_token", (what, body)
    # Nothing about the token: not the token, not one of its parts, not a claim value.
    for part in [token, *token.split(".")]:
        if len(part) > 8:
            assert part not in resp.text, what
    assert body["detail"] == DETAIL, (what, body)  # one sentence for every reason


async def idp_public_pem(idp: IdentityProvider) -> bytes:
    async with httpx.AsyncClient(base_url=idp.issuer) as client:
        jwk = (await client.get("/jwks")).json()["keys"][0]
    key = jwt.PyJWK(jwk).key
    return key.public_bytes(  # type: ignore[no-any-return]
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


# --- a signed-in user owns threads like a key's principal ------------------------------------
async def test_signed_in_users_own_their_threads_on_every_route(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    async with (
        running_idp(tmp_path / "idp.log") as idp,
        app_factory(start_worker=False, **idp.settings()) as h,
    ):
        carol = bearer(await idp.token("carol"))
        dave = bearer(await idp.token("dave"))
        made = await h.client.post("/v1/threads", json={"title": "carol's"}, headers=carol)
        assert made.status_code == 201, made.text
        tid = made.json()["id"]
        listed = (await h.client.get("/v1/threads", headers=carol)).json()["items"]
        assert [t["id"] for t in listed] == [tid]
        # Dave (another user) and the API keys' principals see nothing of it: the same 404.
        missing = f"/v1/threads/{uuid.uuid4()}"
        absent = (await h.client.get(missing, headers=carol)).json()
        for other in (dave, AUTH, OTHER_AUTH):
            assert (await h.client.get("/v1/threads", headers=other)).json()["items"] == []
            for method, path, body in [
                ("GET", f"/v1/threads/{tid}", None),
                ("PATCH", f"/v1/threads/{tid}", {"title": "mine"}),
                ("DELETE", f"/v1/threads/{tid}", None),
                ("POST", f"/v1/threads/{tid}/messages", {"content": "hi"}),
                ("GET", f"/v1/threads/{tid}/messages", None),
                ("GET", f"/v1/threads/{tid}/runs", None),
                ("GET", f"/v1/threads/{tid}/agent-state", None),
                ("POST", f"/v1/threads/{tid}/context/compress", None),
                ("GET", f"/v1/threads/{tid}/workdir/tool-results/x.txt", None),
            ]:
                resp = await h.client.request(method, path, json=body, headers=other)
                assert resp.status_code == 404, (method, path, resp.text)
                assert resp.json()["error"] == "not_found"
                assert tid not in resp.text.replace(f"thread {tid} not found", "")
            gone = await h.client.get(missing, headers=other)
            assert gone.json()["error"] == absent["error"]
        # Untouched by the others' attempts.
        mine = (await h.client.get(f"/v1/threads/{tid}", headers=carol)).json()
        assert mine["title"] == "carol's"
        assert (await h.client.get(f"/v1/threads/{tid}/messages", headers=carol)).json()[
            "items"
        ] == []
        # The same thread on the LangGraph door, for the same user only.
        got = await h.client.get(f"/threads/{tid}", headers=carol)
        assert got.status_code == 200, got.text
        assert (await h.client.get(f"/threads/{tid}", headers=dave)).status_code == 404
        found = (await h.client.post("/threads/search", json={}, headers=carol)).json()
        assert [t["thread_id"] for t in found] == [tid]
        assert (await h.client.post("/threads/search", json={}, headers=dave)).json() == []

        # Every /v1 operation lets a valid token past the guard (as test_security does for keys).
        for method, path, op in await openapi_operations(h):
            if not path.startswith("/v1/"):
                continue
            resp = await h.client.request(
                method, concrete_path(path), json=BODIES.get(op["operationId"]), headers=carol
            )
            assert resp.status_code not in (401, 503), (op["operationId"], resp.text)


# --- the forged-token matrix -------------------------------------------------------------------
async def forgeries(idp: IdentityProvider) -> dict[str, tuple[str, str]]:
    """name -> (token, the reason the service must log and count)."""
    good = await idp.token("carol")
    _, payload, signature = segments(good)
    kid = await idp.kid()  # this IdP's tokens name no kid: forgeries may name its key's
    head, body, _ = good.split(".")
    pem = await idp_public_pem(idp)
    confused_input = (
        f"{b64(json.dumps({'alg': 'HS256', 'typ': 'JWT', 'kid': kid}).encode())}.{body}"
    )
    confused = hmac.new(pem, confused_input.encode(), hashlib.sha256).digest()
    own_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    tampered = {**payload, "sub": "dave"}
    flipped = signature[:-2] + ("AA" if signature[-2:] != "AA" else "BB")
    return {
        "wrong issuer (same key, iss http://localhost:port)": (
            await idp.token("carol", host="localhost"),
            "wrong_issuer",
        ),
        "wrong audience": (await idp.token("carol", client_id="another-app"), "wrong_audience"),
        "alg none": (unsigned({"alg": "none", "typ": "JWT"}, payload), "algorithm_not_allowed"),
        "alg none, signature kept": (
            unsigned({"alg": "none", "kid": kid}, payload, signature),
            "algorithm_not_allowed",
        ),
        "HS256 signed with the public key": (
            f"{confused_input}.{b64(confused)}",
            "algorithm_not_allowed",
        ),
        "unknown key": (
            jwt.encode(payload, own_key, "RS256", headers={"kid": "forged-kid"}),
            "unknown_key",
        ),
        "own key under the IdP's kid": (
            jwt.encode(payload, own_key, "RS256", headers={"kid": kid}),
            "bad_signature",
        ),
        "payload changed (sub)": (
            f"{head}.{b64(json.dumps(tampered).encode())}.{signature}",
            "bad_signature",
        ),
        "signature flipped": (f"{head}.{body}.{flipped}", "bad_signature"),
        "signature removed": (f"{head}.{body}.", "bad_signature"),
        "principal of an API key": (await idp.token("alice"), "principal_reserved"),
        "garbage": ("not-a-jwt", "malformed"),
        "three garbage parts": ("a.b.c", "malformed"),
        "header not JSON": (f"{b64(b'nope')}.{body}.{signature}", "malformed"),
    }


async def test_forged_tokens_get_one_and_the_same_refusal(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    async with (
        running_idp(tmp_path / "idp.log") as idp,
        app_factory(start_worker=False, **idp.settings()) as h,
    ):
        matrix = await forgeries(idp)
        ops = [o for o in await openapi_operations(h) if o[1].startswith("/v1/")]
        wrong_key = await h.client.get("/v1/threads", headers=bearer("no-such-key"))
        assert_invalid_token(wrong_key, "no-such-key", "unknown API key")
        expected = wrong_key.json()
        for what, (token, reason) in matrix.items():
            before = refusals(reason)
            for method, path, op in ops:
                resp = await h.client.request(
                    method,
                    concrete_path(path),
                    json=BODIES.get(op["operationId"]),
                    headers=bearer(token),
                )
                assert_invalid_token(resp, token, f"{what} on {op['operationId']}")
                assert resp.json() == expected, what  # one answer, whatever the reason
            # The reason was told apart (counted; logged: test_sign_in_process.py).
            assert refusals(reason) - before == len(ops), (what, reason)
            # The LangGraph door answers the same.
            lg = await h.client.post("/threads/search", json={}, headers=bearer(token))
            assert_invalid_token(lg, token, f"{what} on the LangGraph door")
        # Nothing was created by any of them.
        carol = bearer(await idp.token("carol"))
        assert (await h.client.get("/v1/threads", headers=carol)).json()["items"] == []


async def test_expired_and_not_yet_valid_tokens_from_a_real_idp(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    # An IdP issuing tokens that expired an hour ago, and one whose clock runs an hour ahead
    # (iat in the future): the same refusal, their own reasons.
    for options, reason in [
        ({"token_max_age": -3600}, "expired"),
        ({"clock_offset": "+1h"}, "not_yet_valid"),
    ]:
        async with (
            running_idp(tmp_path / f"{reason}.log", **options) as idp,
            app_factory(start_worker=False, **idp.settings(auth_jwt_leeway_seconds=60)) as h,
        ):
            token = await idp.token("carol")
            before = refusals(reason)
            resp = await h.client.get("/v1/threads", headers=bearer(token))
            assert_invalid_token(resp, token, reason)
            assert refusals(reason) == before + 1


async def test_principal_claim_required_claim_and_unverified_email(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    async with running_idp(tmp_path / "idp.log") as idp:
        await idp.token("erin", {"email": "erin@example.com", "roles": ["threadkeeper"]})
        await idp.token("frank", {"email": "frank@example.com", "email_verified": False})
        async with app_factory(
            start_worker=False,
            **idp.settings(
                auth_jwt_principal_claim="email", auth_jwt_required_claim="roles=threadkeeper"
            ),
        ) as h:
            erin = await idp.token("erin", scope="openid email")
            made = await h.client.post("/v1/threads", json={}, headers=bearer(erin))
            assert made.status_code == 201, made.text
            owner = await h.container.threads.view(uuid.UUID(made.json()["id"]), "erin@example.com")
            assert owner is not None  # the email claim is the principal
            cases = [
                (await idp.token("erin", scope="openid"), "missing_principal"),  # no email scope
                (await idp.token("frank", scope="openid email"), "email_not_verified"),
            ]
            await idp.token("gina", {"email": "gina@example.com", "roles": ["viewer"]})
            cases.append((await idp.token("gina", scope="openid email"), "missing_required_claim"))
            for token, reason in cases:
                before = refusals(reason)
                resp = await h.client.get("/v1/threads", headers=bearer(token))
                assert_invalid_token(resp, token, reason)
                assert refusals(reason) == before + 1, reason


# --- keys rotate; a flood of forged kids costs the IdP nothing ---------------------------------
async def test_keys_rotate_without_a_restart(app_factory: AppFactory, tmp_path: Path) -> None:
    async with (
        running_idp(tmp_path / "idp.log") as idp,
        app_factory(start_worker=False, **idp.settings(auth_jwt_jwks_refresh_seconds=0)) as h,
    ):
        old = await idp.token("carol")
        assert (await h.client.get("/v1/threads", headers=bearer(old))).status_code == 200
        old_kid = await idp.kid()
        await idp.restart()  # a new signing key; the old one is withdrawn
        assert await idp.kid() != old_kid
        new = await idp.token("carol")
        fetched = idp.jwks_requests()
        # Twenty requests at once with the new kid: all accepted, one fetch between them.
        answers = await asyncio.gather(
            *(h.client.get("/v1/threads", headers=bearer(new)) for _ in range(20))
        )
        assert [a.status_code for a in answers] == [200] * 20
        assert idp.jwks_requests() == fetched + 1
        # The withdrawn key checks nothing any more (these tokens name no kid: the one key
        # the JWKS lists now refuses the signature).
        before = refusals("bad_signature")
        assert_invalid_token(
            await h.client.get("/v1/threads", headers=bearer(old)), old, "rotated-out key"
        )
        assert refusals("bad_signature") == before + 1


async def test_a_flood_of_unknown_kids_fetches_the_keys_once(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    async with (
        running_idp(tmp_path / "idp.log") as idp,
        app_factory(start_worker=False, **idp.settings(auth_jwt_jwks_refresh_seconds=3600)) as h,
    ):
        good = await idp.token("carol")
        assert (await h.client.get("/v1/threads", headers=bearer(good))).status_code == 200
        fetched = idp.jwks_requests()
        own_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _, payload, _ = segments(good)
        for i in range(100):
            # Half name a kid nobody knows, half name none (the IdP's own tokens name none).
            headers = {"kid": f"kid-{i}"} if i % 2 else None
            forged = jwt.encode(payload, own_key, "RS256", headers=headers)
            resp = await h.client.get("/v1/threads", headers=bearer(forged))
            assert_invalid_token(resp, forged, f"kid-{i}")
        assert idp.jwks_requests() == fetched  # the last fetch was within the refresh window
        assert (await h.client.get("/v1/threads", headers=bearer(good))).status_code == 200


# --- the identity provider goes down ------------------------------------------------------------
async def test_idp_down_fails_closed_while_cached_keys_keep_working(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    async with (
        running_idp(tmp_path / "idp.log") as idp,
        app_factory(
            start_worker=False,
            **idp.settings(auth_jwt_jwks_cache_seconds=0.2, auth_jwt_jwks_refresh_seconds=0),
        ) as h,
    ):
        token = await idp.token("carol")
        made = await h.client.post("/v1/threads", json={}, headers=bearer(token))
        assert made.status_code == 201
        own_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _, payload, _ = segments(token)
        await idp.stop()
        errors = jwks_fetches("error")

        async def refresh_failed() -> bool:
            # The cache expired and the refresh failed: the cached key still checks the token.
            resp = await h.client.get("/v1/threads", headers=bearer(token))
            assert resp.status_code == 200, resp.text
            return jwks_fetches("error") > errors

        await wait_until(refresh_failed, "a failed JWKS refresh")
        resp = await h.client.get("/v1/threads", headers=bearer(token))
        assert resp.status_code == 200 and len(resp.json()["items"]) == 1
        # A key the service never saw cannot be checked: 503, never accepted.
        unknown = jwt.encode(payload, own_key, "RS256", headers={"kid": "rotated-while-down"})
        down = await h.client.get("/v1/threads", headers=bearer(unknown))
        assert down.status_code == 503, down.text
        assert down.json()["error"] == "identity_provider_unavailable"
        assert down.headers["retry-after"] == "5"
        assert unknown.split(".")[1] not in down.text
        # API keys do not depend on the IdP.
        assert (await h.client.get("/v1/threads", headers=AUTH)).status_code == 200
        # Back up with a rotated key: its tokens are accepted, the old key is gone.
        await idp.start()
        fresh = await idp.token("carol")
        back = await h.client.get("/v1/threads", headers=bearer(fresh))
        assert back.status_code == 200 and len(back.json()["items"]) == 1
        assert_invalid_token(
            await h.client.get("/v1/threads", headers=bearer(token)), token, "old key"
        )


async def test_idp_down_from_the_start(app_factory: AppFactory, tmp_path: Path) -> None:
    idp = IdentityProvider(tmp_path / "idp.log")  # never started: nothing listens on its port
    async with (
        running_idp(tmp_path / "other.log") as elsewhere,
        app_factory(start_worker=False, **idp.settings(auth_jwt_jwks_refresh_seconds=0)) as h,
    ):
        token = await elsewhere.token("carol")
        for _ in range(3):
            resp = await h.client.get("/v1/threads", headers=bearer(token))
            assert resp.status_code == 503, resp.text
            assert resp.json()["error"] == "identity_provider_unavailable"
        assert (await h.client.get("/v1/threads", headers=AUTH)).status_code == 200


# --- stream tokens and the LangGraph door's headers ---------------------------------------------
async def test_stream_tokens_for_signed_in_users(app_factory: AppFactory, tmp_path: Path) -> None:
    async with running_idp(tmp_path / "idp.log") as idp, app_factory(**idp.settings()) as h:
        carol = bearer(await idp.token("carol"))
        tid = (await h.client.post("/v1/threads", json={}, headers=carol)).json()["id"]
        posted = await h.client.post(
            f"/v1/threads/{tid}/messages", json={"content": "hello"}, headers=carol
        )
        assert posted.status_code == 202

        async def run_id() -> bool:
            items = (await h.client.get(f"/v1/threads/{tid}/runs", headers=carol)).json()["items"]
            return bool(items) and items[0]["status"] == "completed"

        await wait_until(run_id, "carol's run to complete")
        rid = (await h.client.get(f"/v1/threads/{tid}/runs", headers=carol)).json()["items"][0][
            "id"
        ]
        dave = bearer(await idp.token("dave"))
        assert (
            await h.client.post(f"/v1/runs/{rid}/stream-token", headers=dave)
        ).status_code == 404
        issued = await h.client.post(f"/v1/runs/{rid}/stream-token", headers=carol)
        assert issued.status_code == 200, issued.text
        stream = await h.client.get(
            f"/v1/runs/{rid}/events", params={"stream_token": issued.json()["token"]}
        )
        assert stream.status_code == 200
        assert '"final": true' in stream.text or '"final":true' in stream.text


async def test_langgraph_door_headers(app_factory: AppFactory, tmp_path: Path) -> None:
    async with (
        running_idp(tmp_path / "idp.log") as idp,
        app_factory(start_worker=False, **idp.settings()) as h,
    ):
        token = await idp.token("carol")
        made = await h.client.post("/threads", json={}, headers=bearer(token))
        assert made.status_code == 200, made.text
        # X-Api-Key is for keys: a token there is refused like a wrong key.
        resp = await h.client.post("/threads/search", json={}, headers={"X-Api-Key": token})
        assert_invalid_token(resp, token, "a token in X-Api-Key")
        # Both headers (an SDK filled X-Api-Key from LANGSMITH_API_KEY): Authorization decides.
        both = await h.client.post(
            "/threads/search",
            json={},
            headers={**bearer(token), "X-Api-Key": "lsv2_some_langsmith_key"},
        )
        assert both.status_code == 200
        assert [t["thread_id"] for t in both.json()] == [made.json()["thread_id"]]
        no_token = await h.client.post("/threads/search", json={})
        assert no_token.status_code == 401 and no_token.json()["error"] == "unauthorized"
