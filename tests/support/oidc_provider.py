"""A real OpenID Connect provider process (``oidc-provider-mock``, from the lock file) for the
sign-in tests: discovery, a JWKS, and ID tokens (RS256 JWTs) issued through its real
authorization-code flow (``/oauth2/authorize`` then ``/oauth2/token``).

- Its signing key is made when the process starts: ``restart()`` on the same port is a key
  rotation as the service sees it (same issuer, new ``kid``, the old key gone).
- ``stop()`` is the identity provider going down.
- ``token_max_age`` (seconds, may be negative: tokens that are expired when issued) and
  ``clock_offset`` (the IdP's clock runs ahead or behind, through Debian's libfaketime preloaded:
  ``scripts/ensure_faketime.sh``) produce the tokens a real IdP issues with a skewed clock.
- ``jwks_requests()`` counts the ``GET /jwks`` lines of its access log (what the service
  really asked for).
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from tests.support.processes import free_port, stop

#: The client id tokens are issued to: their ``aud``, so the service's configured audience.
CLIENT_ID = "threadkeeper"
REDIRECT_URI = "http://127.0.0.1/callback"


def libfaketime() -> str:
    """Debian's libfaketime (package ``faketime``: scripts/ensure_faketime.sh)."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    assert found, "libfaketime is missing: run scripts/ensure_faketime.sh"
    return found[0]


class IdentityProvider:
    def __init__(
        self,
        log: Path,
        *,
        port: int | None = None,
        token_max_age: int = 3600,
        clock_offset: str = "",
    ) -> None:
        self.port = port or free_port()
        self.log = log
        self.token_max_age = token_max_age
        self.clock_offset = clock_offset
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def settings(self, **overrides: Any) -> dict[str, Any]:
        """Threadkeeper settings trusting this IdP (flat names, as ``app_factory`` takes)."""
        return {
            "auth_jwt_issuer": self.issuer,
            "auth_jwt_audience": CLIENT_ID,
            "auth_jwt_leeway_seconds": 0,
            **overrides,
        }

    async def start(self) -> None:
        argv = [
            sys.executable,
            "-W",
            "ignore",
            "-m",
            "oidc_provider_mock",
            "--port",
            str(self.port),
            f"--token-max-age={self.token_max_age}",
        ]
        env = dict(os.environ)
        if self.clock_offset:
            # libfaketime preloaded into the IdP itself, not the ``faketime`` command: that one
            # forks the program and dies on SIGINT without passing it on, so the IdP outlived
            # its test.
            env.update(LD_PRELOAD=libfaketime(), FAKETIME=self.clock_offset)
        with self.log.open("ab") as sink:
            self.proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env)  # noqa: ASYNC220 - returns at once
        await self._wait_ready()

    async def _wait_ready(self, timeout: float = 60) -> None:
        assert self.proc is not None
        deadline = asyncio.get_running_loop().time() + timeout
        async with httpx.AsyncClient(base_url=self.issuer) as client:
            while True:
                if self.proc.poll() is not None:
                    raise AssertionError(f"the IdP exited: {self.log.read_text()[-2000:]}")
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get("/.well-known/openid-configuration")).status_code == 200:
                        return
                if asyncio.get_running_loop().time() > deadline:
                    raise AssertionError(f"the IdP never answered: {self.log.read_text()[-2000:]}")
                await asyncio.sleep(0.1)

    async def stop(self) -> None:
        if self.proc is not None:
            await stop(self.proc, timeout=10)
            self.proc = None

    async def restart(self) -> None:
        """A new process on the same port: a new signing key (rotation)."""
        await self.stop()
        await self.start()

    async def kid(self) -> str:
        async with httpx.AsyncClient(base_url=self.issuer) as client:
            keys = (await client.get("/jwks")).json()["keys"]
        return str(keys[0]["kid"])

    def jwks_requests(self) -> int:
        return self.log.read_text(errors="replace").count('"GET /jwks HTTP/1.1" 200')

    async def token(
        self,
        sub: str,
        claims: dict[str, Any] | None = None,
        *,
        client_id: str = CLIENT_ID,
        scope: str = "openid",
        host: str = "127.0.0.1",
    ) -> str:
        """An ID token for ``sub`` from the IdP's own endpoints (authorize, then token).

        ``claims``: the user's claims (set through ``PUT /users/<sub>``; standard ones such
        as ``email`` appear only with their scope). ``host``: the IdP names itself after the
        Host it is reached by, so ``localhost`` gives the same key another issuer."""
        base = f"http://{host}:{self.port}"
        async with httpx.AsyncClient(base_url=base) as client:
            if claims is not None:
                put = await client.put(f"/users/{sub}", json=claims)
                assert put.status_code == 204, put.text
            authorized = await client.post(
                "/oauth2/authorize",
                params={
                    "client_id": client_id,
                    "redirect_uri": REDIRECT_URI,
                    "response_type": "code",
                    "scope": scope,
                    "state": "s",
                },
                data={"sub": sub},
            )
            assert authorized.status_code == 302, authorized.text
            code = parse_qs(urlsplit(authorized.headers["location"]).query)["code"][0]
            issued = await client.post(
                "/oauth2/token",
                data={
                    "grant_type": "authorization_code",
                    "code": code,
                    "redirect_uri": REDIRECT_URI,
                    "client_id": client_id,
                    "client_secret": "secret",
                },
            )
            assert issued.status_code == 200, issued.text
            return str(issued.json()["id_token"])


@contextlib.asynccontextmanager
async def running_idp(log: Path, **options: Any) -> AsyncIterator[IdentityProvider]:
    idp = IdentityProvider(log, **options)
    await idp.start()
    try:
        yield idp
    finally:
        await idp.stop()
