"""Issue 35 with real clients and a real server process, all signed in with tokens from a real
OpenID Connect provider process: the official langgraph-sdk, the openapi-python-client
generated from the live document (the README flow, tests/clients/python_flow.py, run with a
token instead of a key), and ``python -m app serve`` configured by environment, whose log names
each refusal's reason and never a token."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from langgraph_sdk import get_client
from langgraph_sdk.errors import NotFoundError

from app.main import create_app
from tests.conftest import API_KEY, AUTH, AppFactory, make_settings
from tests.integration.test_generated_clients import (
    CLIENTS,
    assert_flow,
    generate_python_client,
    no_casts,
    run,
)
from tests.support.corpus import BIG, BIG_DOC
from tests.support.live_server import serve_in_loop, serve_in_thread
from tests.support.oidc_provider import running_idp
from tests.support.processes import served

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def human(text: str) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": text}]}


async def test_langgraph_sdk_with_a_token(app_factory: AppFactory, tmp_path: Path) -> None:
    async with (
        running_idp(tmp_path / "idp.log") as idp,
        app_factory(**idp.settings()) as h,
        serve_in_loop(h.app) as url,
    ):
        carol = get_client(
            url=url, api_key=None, headers={"Authorization": f"Bearer {await idp.token('carol')}"}
        )
        thread = await carol.threads.create(metadata={"by": "carol"})
        tid = thread["thread_id"]
        final = await carol.runs.wait(tid, "default", input=human("When does a lease expire?"))
        assert isinstance(final, dict) and final["messages"][-1]["type"] == "ai"
        state = await carol.threads.get_state(tid)
        kinds = [m["type"] for m in state["values"]["messages"]]
        assert kinds[0] == "human" and kinds[-1] == "ai", kinds
        # The same thread through /v1 with the same token; nobody else sees it.
        token = await idp.token("carol")
        v1 = await h.client.get(f"/v1/threads/{tid}", headers={"Authorization": f"Bearer {token}"})
        assert v1.status_code == 200, v1.text
        dave = get_client(
            url=url, api_key=None, headers={"Authorization": f"Bearer {await idp.token('dave')}"}
        )
        with pytest.raises(NotFoundError):
            await dave.threads.get(tid)
        assert await dave.threads.search() == []
        # An SDK that also found a LangSmith key in the environment (sent as X-Api-Key): the
        # Authorization header decides.
        with_env_key = get_client(
            url=url, api_key="lsv2_pt_not_ours", headers={"Authorization": f"Bearer {token}"}
        )
        assert [t["thread_id"] for t in await with_env_key.threads.search()] == [tid]


def test_generated_python_client_runs_the_readme_flow_with_a_token(
    clean_db: str, tmp_path: Path
) -> None:
    loop = asyncio.new_event_loop()  # the IdP's helpers are async; this test is not
    idp_cm = running_idp(tmp_path / "idp.log")
    idp = loop.run_until_complete(idp_cm.__aenter__())
    try:
        settings = make_settings(
            clean_db, tmp_path / "workdir", worker_poll_seconds=0.1, **BIG, **idp.settings()
        )
        with serve_in_thread(create_app(settings)) as base_url:
            token = loop.run_until_complete(idp.token("carol"))
            added = httpx.post(  # knowledge bases are per principal: carol's own document
                f"{base_url}/v1/knowledge-bases/default/documents",
                json={"title": "Operations guide", "content": BIG_DOC},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert added.status_code == 201, added.text
            spec = tmp_path / "openapi.json"
            spec.write_bytes(httpx.get(f"{base_url}/schema/openapi.json").content)
            generate_python_client(spec, tmp_path)
            program = tmp_path / "python_flow.py"
            shutil.copy(CLIENTS / "python_flow.py", program)
            no_casts(program)
            lines = run([sys.executable, program.name, base_url, token], tmp_path).splitlines()
            assert_flow(lines)
            assert "run: completed True" in lines, lines
            # The thread it made is carol's: listed for her token, not for the API key's owner.
            mine = httpx.get(
                f"{base_url}/v1/threads", headers={"Authorization": f"Bearer {token}"}
            ).json()["items"]
            assert len(mine) == 1
            assert httpx.get(f"{base_url}/v1/threads", headers=AUTH).json()["items"] == []
            # A refused token, through the generated client: its declared 401 body.
            refused = tmp_path / "refused.py"
            refused.write_text(
                "import sys\n"
                "from threadkeeper_client import AuthenticatedClient\n"
                "from threadkeeper_client.api.threads import list_threads\n"
                "client = AuthenticatedClient(base_url=sys.argv[1], token=sys.argv[2])\n"
                "response = list_threads.sync_detailed(client=client)\n"
                "print(int(response.status_code), response.headers['www-authenticate'])\n"
                "print(type(response.parsed).__name__, response.parsed.error.value)\n"
            )
            tampered = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
            out = run([sys.executable, refused.name, base_url, tampered], tmp_path).splitlines()
            assert out[0] == '401 Bearer error="invalid_token"', out
            assert out[1].endswith(" invalid_token"), out
    finally:
        loop.run_until_complete(idp_cm.__aexit__(None, None, None))
        loop.close()


async def test_served_process_logs_reasons_never_tokens(clean_db: str, tmp_path: Path) -> None:
    log_file = tmp_path / "server.log"
    async with running_idp(tmp_path / "idp.log") as idp:
        env = {
            "DATABASE_URL": clean_db,
            "THREADKEEPER_API_KEYS": f"alice:{API_KEY}",
            "THREADKEEPER_LOG_JSON": "true",
            "THREADKEEPER_LOG_LEVEL": "INFO",
            "THREADKEEPER_WORKDIR_ROOT": str(tmp_path / "wd"),
            "THREADKEEPER_AUTH_JWT_ISSUER": idp.issuer,
            "THREADKEEPER_AUTH_JWT_AUDIENCE": "threadkeeper",
        }
        good = await idp.token("carol")
        wrong_audience = await idp.token("carol", client_id="another-app")
        own = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        forged = jwt.encode({"sub": "carol"}, own, "RS256", headers={"kid": "forged"})
        async with (
            served(env, log_file, inherit_settings=False) as (base_url, _),
            httpx.AsyncClient(base_url=base_url) as client,
        ):
            ok = await client.post(
                "/v1/threads", json={}, headers={"Authorization": f"Bearer {good}"}
            )
            assert ok.status_code == 201, ok.text
            for token in (wrong_audience, forged, "not-a-token"):
                resp = await client.get("/v1/threads", headers={"Authorization": f"Bearer {token}"})
                assert resp.status_code == 401
    text = log_file.read_text(errors="replace")
    events = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    reasons = [e["reason"] for e in events if e.get("event") == "auth_refused"]
    assert reasons == ["wrong_audience", "unknown_key", "malformed"], reasons
    assert any(e.get("event") == "jwks_loaded" for e in events)
    # The tokens, and each of their parts, are nowhere in the log.
    for token in (good, wrong_audience, forged):
        for part in token.split("."):
            assert part not in text
    # The access line names the principal the token mapped to.
    access = [e for e in events if e.get("event") == "http_request" and e.get("status") == 201]
    assert access and access[0]["principal"] == "carol"
