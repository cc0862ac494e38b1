"""Every log line of the real server process is JSON (uvicorn and stdlib included)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import httpx
import pytest

from tests.support.app_harness import API_KEY, AUTH
from tests.support.processes import app_process, free_port, reaped, served, stop
from tests.support.waiting import wait_terminal, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_every_line_is_json_and_unknown_settings_are_named_once(
    clean_db: str, tmp_path: Path
) -> None:
    log_file = tmp_path / "server.log"
    env = {
        "DATABASE_URL": clean_db,
        "THREADKEEPER_API_KEYS": f"alice:{API_KEY}",
        "THREADKEEPER_LOG_JSON": "true",
        "THREADKEEPER_LOG_LEVEL": "INFO",
        "THREADKEEPER_WORKDIR_ROOT": str(tmp_path / "wd"),
        "THREADKEEPER_WORKER_POLL_SECONDS": "0.1",
        "THREADKEEPER_SUMARY_THRESHOLD": "5000",  # typo: must be reported
        "THREADKEEPER_NOT_A_SETTING": "1",
    }
    async with (
        served(env, log_file, inherit_settings=False) as (base_url, _),
        httpx.AsyncClient(base_url=base_url) as client,
    ):
        missing = await client.get("/no/such/route")
        assert missing.status_code == 404
        tid = (await client.post("/v1/threads", json={}, headers=AUTH)).json()["id"]
        posted = await client.post(
            f"/v1/threads/{tid}/messages", json={"content": "hello"}, headers=AUTH
        )
        assert posted.status_code == 202
        assert await wait_terminal(client, tid, 1) == "completed"
    lines = [line for line in log_file.read_text().splitlines() if line.strip()]
    events = []
    for line in lines:
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            raise AssertionError(f"not a JSON log line: {line!r}") from None
    assert all(isinstance(e, dict) and "event" in e and "level" in e for e in events)
    # uvicorn's own records (stdlib logging) went through the same JSON renderer.
    assert any(str(e.get("logger", "")).startswith("uvicorn") for e in events), events
    unknown = [e for e in events if e["event"] == "unknown_settings"]
    assert len(unknown) == 1
    assert unknown[0]["names"] == ["THREADKEEPER_NOT_A_SETTING", "THREADKEEPER_SUMARY_THRESHOLD"]
    assert unknown[0]["level"] == "warning"
    # The access line of the 404 carries the request id the client got.
    access = [e for e in events if e["event"] == "http_request" and e.get("status") == 404]
    assert [e["request_id"] for e in access] == [missing.headers["x-request-id"]]
    assert any(e["event"] == "run_finished" for e in events)


async def test_standalone_worker_serves_its_counters(clean_db: str, tmp_path: Path) -> None:
    """``python -m app worker`` has no HTTP API; its counters get their own port."""
    port = free_port()
    env = {
        "DATABASE_URL": clean_db,
        "THREADKEEPER_WORKDIR_ROOT": str(tmp_path / "wd"),
        "THREADKEEPER_WORKER_METRICS_PORT": str(port),
    }
    log = tmp_path / "worker.log"
    proc = app_process(["worker"], env, log, inherit_settings=False)
    resp: httpx.Response | None = None
    with reaped(proc):
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:

                async def scraped() -> bool:
                    nonlocal resp
                    assert proc.poll() is None, f"worker exited with {proc.returncode}"
                    with contextlib.suppress(httpx.TransportError):
                        resp = await client.get("/metrics")
                    return resp is not None

                await wait_until(scraped, "the worker's metrics port", timeout=60)
            assert resp is not None and resp.status_code == 200
            assert "threadkeeper_lease_recoveries_total 0.0" in resp.text
            assert "threadkeeper_summarizer_calls_total" in resp.text
        finally:
            await stop(proc)
