"""How long a refused token takes, by how close the forgery came (issue 35).

A real OpenID Connect provider process (oidc-provider-mock, as in the tests) issues a token; the
service's own verifier (``app/api/jwt_auth.py``, keys fetched from that IdP) then refuses
forgeries of every kind, interleaved, ``--repeats`` times each. Printed per kind: the median
refusal time through the guard's authenticator (what ships: decoy check + the refusal floor of
``app/api/auth.py``), of the verifier alone with its decoy check, and of the verifier with the
decoy step skipped (what a refusal before the signature check costs otherwise), each as a ratio
to the bad-signature refusal. Ratios near 1 in the first column: the time does not say how far a
forgery got.

    .venv/bin/python benchmarks/sign_in.py [--repeats 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from app.api.auth import ApiKeyAuthority, Authenticator
from app.api.jwks import JwksCache
from app.api.jwt_auth import JwtVerifier, TokenRefused, _Decoy
from app.config import load_settings
from app.domain.errors import InvalidToken


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


class _NoDecoy(_Decoy):
    def check(self, alg: str) -> None:
        return None


async def forgeries(idp: Any) -> dict[str, str]:
    good = await idp.token("carol")
    head, body, signature = good.split(".")
    kid = await idp.kid()
    own = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    hs_input = f"{b64(json.dumps({'alg': 'HS256', 'kid': kid}).encode())}.{body}"
    flipped = signature[:-2] + ("AA" if signature[-2:] != "AA" else "BB")
    return {
        "bad signature (last bytes)": f"{head}.{body}.{flipped}",
        "own key, the IdP's kid": jwt.encode(payload, own, "RS256", headers={"kid": kid}),
        "unknown kid": jwt.encode(payload, own, "RS256", headers={"kid": "forged"}),
        "alg none": b64(b'{"alg":"none"}') + f".{body}.",
        "HS256 with the public key": f"{hs_input}.{b64(hmac.new(b'k', hs_input.encode(), hashlib.sha256).digest())}",
        "garbage": "not-a-jwt",
        "wrong audience (real token)": await idp.token("carol", client_id="other"),
    }


class _Connection:
    """What ``Authenticator.authenticate`` touches of a request: its state and path."""

    def __init__(self) -> None:
        self.state = types.SimpleNamespace()
        self.url = types.SimpleNamespace(path="/v1/threads")


async def measure(checker: JwtVerifier | Authenticator, token: str) -> float:
    start = time.perf_counter()
    with contextlib.suppress(TokenRefused, InvalidToken):
        if isinstance(checker, Authenticator):
            await checker.authenticate(_Connection(), token, jwt_ok=True)  # type: ignore[arg-type]
        else:
            await checker.principal_for(token)
    return time.perf_counter() - start


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args()
    from tests.support.oidc_provider import running_idp

    with tempfile.TemporaryDirectory() as tmp:
        async with running_idp(Path(tmp) / "idp.log") as idp:
            settings = load_settings({}, **idp.settings(auth_jwt_jwks_refresh_seconds=3600))
            keys = JwksCache(idp.issuer, refresh_seconds=3600)
            shipped = JwtVerifier(settings.auth, keys, frozenset())
            bare = JwtVerifier(settings.auth, keys, frozenset())
            bare._decoy = _NoDecoy(bare.algorithms)
            shipped_guard = Authenticator(ApiKeyAuthority({}), shipped)
            tokens = await forgeries(idp)
            await measure(shipped, tokens["garbage"])  # the keys are fetched once, before timing
            times: dict[tuple[str, str], list[float]] = {}
            for _ in range(args.repeats):
                for name, token in tokens.items():  # interleaved: drift hits every kind alike
                    for label, verifier in (
                        ("guard", shipped_guard),
                        ("decoy", shipped),
                        ("none", bare),
                    ):
                        times.setdefault((name, label), []).append(await measure(verifier, token))
            await keys.close()
    med = {key: statistics.median(values) * 1e6 for key, values in times.items()}
    base = "bad signature (last bytes)"
    print(f"refusal time, median of {args.repeats} (microseconds; ratio to a bad signature)")
    print(f"{'forgery':30} {'guard (shipped)':>18} {'verifier+decoy':>18} {'no decoy':>18}")
    for name in tokens:
        cells = [
            f"{med[(name, label)]:8.1f} x{med[(name, label)] / med[(base, label)]:5.2f}"
            for label in ("guard", "decoy", "none")
        ]
        print(f"{name:30} {cells[0]:>18} {cells[1]:>18} {cells[2]:>18}")


if __name__ == "__main__":
    asyncio.run(main())
