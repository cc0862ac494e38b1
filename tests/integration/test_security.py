"""Security promises (issue 6): API keys on every /v1 route, owner isolation, Workdir confinement,
request size limits and no secrets in the logs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from app.compression.workdir import LocalStore
from tests.support.api import BODIES, add_doc, concrete_path, new_thread, openapi_operations
from tests.support.app_harness import API_KEY, AUTH, OTHER_AUTH, OTHER_KEY, AppFactory, AppHarness
from tests.support.live_server import serve_in_loop
from tests.support.openai_server import OpenAICompatibleServer
from tests.support.processes import served
from tests.support.waiting import wait_terminal

pytestmark = pytest.mark.integration

BAD_CREDENTIALS = [
    {},
    {"Authorization": "Bearer wrong-key"},
    {"Authorization": f"Bearer {API_KEY}x"},
    {"Authorization": f"Basic {API_KEY}"},
    {"Authorization": API_KEY},
    {"Authorization": "Bearer "},
    {"X-API-Key": API_KEY},
]


def expected_refusal(headers: dict[str, str]) -> tuple[str, str]:
    """(error code, WWW-Authenticate): a bearer credential sent and refused is
    ``invalid_token`` (RFC 6750 3.1); no usable credential at all is ``unauthorized``."""
    value = headers.get("Authorization", "")
    if value.startswith("Bearer ") and value != "Bearer ":
        return "invalid_token", 'Bearer error="invalid_token"'
    return "unauthorized", "Bearer"


async def test_every_v1_operation_rejects_missing_and_wrong_keys(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        ops = [o for o in await openapi_operations(h) if o[1].startswith("/v1/")]
        # The document lists every /v1 route the app serves (nothing undocumented escapes).
        served = {
            (m, re.sub(r":\w+\}", "}", r.path))
            for r in h.app.routes
            if r.path.startswith("/v1/")
            for m in r.methods
            if m != "OPTIONS"  # CORS preflight: carries no credentials by design, returns no data
        }
        assert served == {(m, p) for m, p, _ in ops}
        # issue 14: GetRequest, CancelRequest, WaitRun, UpdateThread; issue 19: ListAgents,
        # GetAgent, ListDocuments, DeleteDocument; issue 21: WaitRequest, CreateStreamToken
        # issue 36: ListBranches, RegenerateAnswer, EditMessage
        assert len(ops) == 29

        for method, path, op in ops:
            # StreamRunEvents also takes a run-scoped stream token (tests/.../test_stream_token.py).
            alternatives = [{"StreamToken": []}] if op["operationId"] == "StreamRunEvents" else []
            assert op.get("security") == [{"BearerAuth": []}, *alternatives], op["operationId"]
            url = concrete_path(path)
            body = BODIES.get(op["operationId"])
            for headers in BAD_CREDENTIALS:
                resp = await h.client.request(method, url, json=body, headers=headers)
                assert resp.status_code == 401, (op["operationId"], headers, resp.text)
                code, challenge = expected_refusal(headers)
                assert resp.json()["error"] == code
                assert resp.headers["www-authenticate"] == challenge
                assert API_KEY not in resp.text
                # The LangGraph door's header alone gets told where /v1 takes the key.
                hinted = "does not read X-Api-Key" in resp.json()["detail"]
                assert hinted == (list(headers) == ["X-API-Key"]), (headers, resp.text)
            # With the right key the same request gets past the guard.
            ok = await h.client.request(method, url, json=body, headers=AUTH)
            assert ok.status_code != 401, (op["operationId"], ok.text)

        # Nothing was created by the rejected requests.
        listed = (await h.client.get("/v1/threads", headers=AUTH)).json()["items"]
        assert len(listed) == 1  # only the one CreateThread sent with the valid key


# --- owner isolation for runs -------------------------------------------------------------------
async def test_runs_of_another_owner_are_404_and_untouched(app_factory: AppFactory) -> None:
    async with app_factory(approval_tools="query_kb") as h:
        await add_doc(h)
        tid = await new_thread(h)
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "lease?"}, headers=AUTH)
        run = await h.wait_for_run(tid, statuses={"interrupted"})
        rid = run["id"]
        approve = {"decisions": [{"type": "approve"}]}
        for method, path, body in [
            ("GET", f"/v1/runs/{rid}", None),
            ("POST", f"/v1/runs/{rid}/cancel", None),
            ("POST", f"/v1/runs/{rid}/resume", approve),
            ("GET", f"/v1/runs/{rid}/events", None),
            ("GET", f"/v1/threads/{tid}/runs", None),
        ]:
            resp = await h.client.request(method, path, json=body, headers=OTHER_AUTH)
            assert resp.status_code == 404, (method, path, resp.text)
            assert resp.json()["error"] == "not_found"
            assert rid not in resp.text.replace(f"run {rid} not found", "")
        # Bob's cancel and resume did nothing: the run still waits for Alice.
        mine = (await h.client.get(f"/v1/runs/{rid}", headers=AUTH)).json()
        assert mine["status"] == "interrupted" and mine["interrupt"] is not None
        resumed = await h.client.post(f"/v1/runs/{rid}/resume", json=approve, headers=AUTH)
        assert resumed.status_code == 200
        done = await h.wait_for_run(tid, statuses={"completed", "failed"})
        assert done["status"] == "completed"
        events = await h.client.get(f"/v1/runs/{rid}/events", headers=OTHER_AUTH)
        assert events.status_code == 404


# --- Workdir confinement -------------------------------------------------------------------------
SECRETS = ("ALICE-FILE-A", "BOB-FILE-B", "ROOT-LEVEL-SECRET", "OUTSIDE-SECRET")


@contextlib.asynccontextmanager
async def workdir_fixture(
    app_factory: AppFactory, tmp_path: Path
) -> AsyncIterator[tuple[AppHarness, str, str]]:
    async with app_factory(start_worker=False) as h:
        tid = await new_thread(h)
        bob_tid = (await h.client.post("/v1/threads", json={}, headers=OTHER_AUTH)).json()["id"]
        wd = h.container.workdir
        await wd.write_tool_result(tid, "call_a", "ALICE-FILE-A full text")
        await wd.write_tool_result(bob_tid, "call_b", "BOB-FILE-B full text")
        store = wd.store
        assert isinstance(store, LocalStore)
        (store.root / "secret.txt").write_text("ROOT-LEVEL-SECRET")
        outside = tmp_path / "outside.txt"
        outside.write_text("OUTSIDE-SECRET")
        thread_dir = store.thread_dir(tid)
        # Symlinks planted inside Alice's own folder that point out of it.
        (thread_dir / "tool-results" / "link.txt").symlink_to(outside)
        (thread_dir / "tool-results" / "root-link.txt").symlink_to(store.root / "secret.txt")
        (thread_dir / "escape").symlink_to(store.thread_dir(bob_tid), target_is_directory=True)
        (thread_dir / "etc").symlink_to("/etc", target_is_directory=True)
        yield h, tid, bob_tid


def assert_refused(resp: httpx.Response, what: str) -> None:
    assert resp.status_code in (400, 404), (what, resp.status_code, resp.text)
    assert resp.json()["error"] in ("validation_error", "not_found"), (what, resp.text)
    for secret in SECRETS:
        assert secret not in resp.text, (what, resp.text)
    assert "root:" not in resp.text  # /etc/passwd


async def test_workdir_reads_are_confined_to_the_threads_folder(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    async with workdir_fixture(app_factory, tmp_path) as (h, tid, bob_tid):
        base = f"/v1/threads/{tid}/workdir"
        own = await h.client.get(f"{base}/tool-results/call_a.txt", headers=AUTH)
        assert own.status_code == 200 and own.text == "ALICE-FILE-A full text"

        # Another owner's thread: 404, in both directions.
        assert_refused(
            await h.client.get(f"{base}/tool-results/call_a.txt", headers=OTHER_AUTH), "bob->alice"
        )
        assert_refused(
            await h.client.get(
                f"/v1/threads/{bob_tid}/workdir/tool-results/call_b.txt", headers=AUTH
            ),
            "alice->bob",
        )
        escapes = [  # each is refused outright (400), before any file is opened
            "%2e%2e/secret.txt",
            "%2E%2E/%2E%2E/outside.txt",
            "..%2fsecret.txt",
            "tool-results/%2e%2e/%2e%2e/secret.txt",
            f"%2e%2e/{bob_tid}/tool-results/call_b.txt",
            "..%5csecret.txt",
            "tool-results%5c..%5c..%5csecret.txt",
            "C:%5cWindows%5cwin.ini",
            "~/secret.txt",
            "tool-results/call_a.txt%00.png",
            "tool-results/link.txt",
            "tool-results/root-link.txt",
            "escape/tool-results/call_b.txt",
            "etc/passwd",
        ]
        for attempt in escapes:
            resp = await h.client.get(f"{base}/{attempt}", headers=AUTH)
            assert_refused(resp, attempt)
            assert resp.status_code == 400, (attempt, resp.text)
        # Absolute paths: the router collapses the slashes, so they are read relative to the
        # thread folder (never from the filesystem root): refused or not found, never content.
        for attempt in [
            "/etc/passwd",
            "%2fetc%2fpasswd",
            "%2f" + str(tmp_path).lstrip("/") + "/outside.txt",
            str(h.container.settings.workdir.workdir_path / "secret.txt"),
        ]:
            assert_refused(await h.client.get(f"{base}/{attempt}", headers=AUTH), attempt)
        # A relative path that stays inside but names nothing is simply not found.
        missing = await h.client.get(f"{base}/tool-results/nope.txt", headers=AUTH)
        assert missing.status_code == 404


async def test_workdir_literal_dot_dot_over_a_real_socket(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    """Clients normalize ``..`` away; a raw request line keeps it, as an attacker would send it."""
    async with (
        workdir_fixture(app_factory, tmp_path) as (h, tid, bob_tid),
        serve_in_loop(h.app) as base_url,
    ):
        port = int(base_url.rsplit(":", 1)[1])
        for raw in [
            f"/v1/threads/{tid}/workdir/../secret.txt",
            f"/v1/threads/{tid}/workdir/../../secret.txt",
            f"/v1/threads/{tid}/workdir/../{bob_tid}/tool-results/call_b.txt",
            f"/v1/threads/{tid}/workdir/tool-results/../../secret.txt",
            f"/v1/threads/{bob_tid}/workdir/../{tid}/tool-results/call_a.txt",
        ]:
            status, body = await raw_get(port, raw)
            assert status in (400, 404), (raw, status, body)
            for secret in SECRETS:
                assert secret not in body, (raw, body)
        # The literal-".." attempts within Alice's own thread are refused, not "not found".
        status, _ = await raw_get(port, f"/v1/threads/{tid}/workdir/../secret.txt")
        assert status == 400


async def raw_get(port: int, target: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {API_KEY}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        await writer.drain()
        data = await reader.read()
    finally:
        writer.close()
    head, _, body = data.decode(errors="replace").partition("\r\n\r\n")
    return int(head.split()[1]), body


# --- request size limits -------------------------------------------------------------------------
async def test_request_bodies_over_the_limit_get_413_and_store_nothing(
    app_factory: AppFactory,
) -> None:
    async with app_factory(start_worker=False, max_request_bytes=2048) as h:
        tid = await new_thread(h)
        big_doc = await h.client.post(
            "/v1/knowledge-bases/default/documents",
            json={"title": "huge", "content": "lease " * 1000},
            headers=AUTH,
        )
        assert big_doc.status_code == 413 and big_doc.json()["error"] == "payload_too_large"
        # The answer names the limit and the setting that raises it (issue 30).
        assert big_doc.json()["detail"] == (
            "the request body is over this server's limit of 2048 bytes "
            "(THREADKEEPER_MAX_REQUEST_BYTES)"
        )
        padded = await h.client.post(
            "/v1/threads",
            content=b'{"title": "padded"' + b" " * 4096 + b"}",
            headers={**AUTH, "content-type": "application/json"},
        )
        assert padded.status_code == 413

        async def chunks() -> AsyncIterator[bytes]:
            yield b'{"content": "'
            for _ in range(8):
                yield b"x" * 1024
            yield b'"}'

        streamed = await h.client.post(  # chunked: no Content-Length to trust
            f"/v1/threads/{tid}/messages",
            content=chunks(),
            headers={**AUTH, "content-type": "application/json"},
        )
        assert streamed.status_code == 413, streamed.text
        assert "THREADKEEPER_MAX_REQUEST_BYTES" in streamed.json()["detail"]
        resume = await h.client.post(
            f"/v1/runs/{uuid.uuid4()}/resume",
            json={"decisions": [{"type": "reject", "message": "m" * 4000}]},
            headers=AUTH,
        )
        assert resume.status_code == 413
        # Within the limit everything still works, and nothing of the above was stored.
        search = await h.client.get(
            "/v1/knowledge-bases/default/search", params={"q": "lease"}, headers=AUTH
        )
        assert search.json()["count"] == 0
        threads = (await h.client.get("/v1/threads", headers=AUTH)).json()["items"]
        assert [t["id"] for t in threads] == [tid]
        msgs = (await h.client.get(f"/v1/threads/{tid}/messages", headers=AUTH)).json()["items"]
        assert msgs == []
        ok = await h.client.post(
            f"/v1/threads/{tid}/messages", json={"content": "small"}, headers=AUTH
        )
        assert ok.status_code == 202


# --- no secrets in logs --------------------------------------------------------------------------
@pytest.mark.slow  # a real process
async def test_logs_never_contain_keys_even_on_auth_and_provider_errors(
    clean_db: str, tmp_path: Path
) -> None:
    """The real server process (``python -m app serve``), JSON logs at DEBUG on its stderr."""
    llm_key = "sk-llm-SECRET-6d1f0c"
    db_password = "DB-PASSWORD-SECRET-91"
    wrong_key = "WRONG-KEY-SECRET-77"
    # The local server trusts loopback, so a password in the URL is accepted and ignored.
    db_url = make_url(clean_db).set(password=db_password).render_as_string(hide_password=False)
    log_file = tmp_path / "server.log"
    with OpenAICompatibleServer(api_key=llm_key) as srv:
        env = {
            "DATABASE_URL": db_url,
            "THREADKEEPER_API_KEYS": f"alice:{API_KEY},bob:{OTHER_KEY}",
            "THREADKEEPER_LLM_BASE_URL": srv.base_url,
            "THREADKEEPER_LLM_API_KEY": llm_key,
            # One retry of a transient failure, so the outage below outlasts it.
            "THREADKEEPER_LLM_MAX_RETRIES": "1",
            "THREADKEEPER_LOG_LEVEL": "DEBUG",
            "THREADKEEPER_LOG_JSON": "true",
            "THREADKEEPER_WORKDIR_ROOT": str(tmp_path / "wd"),
            "THREADKEEPER_WORKER_POLL_SECONDS": "0.1",
        }
        async with (
            served(env, log_file) as (base_url, _),
            httpx.AsyncClient(base_url=base_url) as client,
        ):
            for headers in (
                {"Authorization": f"Bearer {wrong_key}"},
                {"Authorization": f"Basic {wrong_key}"},
                {"X-API-Key": API_KEY},
            ):
                denied = await client.get("/v1/threads", headers=headers)
                assert denied.status_code == 401
            tid = (await client.post("/v1/threads", json={}, headers=AUTH)).json()["id"]
            srv.fail_next(401)  # the provider rejects our key
            srv.fail_next(500, times=2)  # then has an outage (the call and its retry)
            statuses: list[str] = []
            for text in ("first", "second", "third"):
                posted = await client.post(
                    f"/v1/threads/{tid}/messages", json={"content": text}, headers=AUTH
                )
                assert posted.status_code == 202
                statuses.append(await wait_terminal(client, tid, len(statuses) + 1))
            assert statuses == ["failed", "failed", "completed"]
            # The provider really received our key (so it was in the process to leak).
            sent = {k.lower(): v for k, v in srv.request_headers[-1].items()}
            assert sent["authorization"] == f"Bearer {llm_key}"
    logs = log_file.read_text(errors="replace")
    events = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
    names = [e.get("event") for e in events]
    assert "container_ready" in names
    assert [e["status"] for e in events if e.get("event") == "run_finished"] == [
        "failed",
        "failed",
        "completed",
    ]
    for secret in (API_KEY, OTHER_KEY, wrong_key, llm_key, db_password):
        assert secret not in logs, secret


# --- input bounds --------------------------------------------------------------------------------
async def test_out_of_range_cursors_are_400_not_500(app_factory: AppFactory) -> None:
    """Found by schemathesis: an ``after_seq`` beyond BIGINT reached PostgreSQL and answered 500."""
    async with app_factory() as h:
        tid = await new_thread(h)
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "hi"}, headers=AUTH)
        run = await h.wait_for_run(tid, statuses={"completed"})
        huge = str(2**80)
        for url, params, headers in [
            (f"/v1/threads/{tid}/messages", {"after_seq": huge}, AUTH),
            (f"/v1/threads/{tid}/messages", {"after_seq": "-1"}, AUTH),
            (f"/v1/runs/{run['id']}/events", {"after": huge}, AUTH),
            (f"/v1/runs/{run['id']}/events", {}, {**AUTH, "Last-Event-ID": huge}),
        ]:
            resp = await h.client.get(url, params=params, headers=headers)
            assert resp.status_code == 400, (url, params, resp.text)
            assert resp.json()["error"] == "validation_error"
        # In range, both cursors still page normally.
        everything = await h.client.get(f"/v1/threads/{tid}/messages", headers=AUTH)
        seqs = [m["seq"] for m in everything.json()["items"]]
        assert len(seqs) == 4 and seqs == sorted(seqs)
        page = await h.client.get(
            f"/v1/threads/{tid}/messages", params={"after_seq": seqs[0]}, headers=AUTH
        )
        assert page.status_code == 200
        assert [m["seq"] for m in page.json()["items"]] == seqs[1:]
        async with h.client.stream("GET", f"/v1/runs/{run['id']}/events", headers=AUTH) as resp:
            full = "".join([c async for c in resp.aiter_text()])
        first = full.split("id: ", 1)[1].split("\r\n", 1)[0].split("\n", 1)[0]
        async with h.client.stream(
            "GET", f"/v1/runs/{run['id']}/events", headers={**AUTH, "Last-Event-ID": first}
        ) as resp:
            rest = "".join([c async for c in resp.aiter_text()])
        assert resp.status_code == 200
        assert f"id: {first}\r\n" not in rest and rest.count("id: ") == full.count("id: ") - 1
