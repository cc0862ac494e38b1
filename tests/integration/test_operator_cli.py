"""The operator's view of the real entry point (``python -m app`` as a process): version,
effective settings, refusals at start in one line, and access logs that say who and why."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import httpx
import pytest

from tests.support.app_harness import API_KEY, AUTH
from tests.support.processes import app_run, free_port, served

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _env(**extra: str) -> dict[str, str]:
    """Only what a process needs besides the settings (no inherited THREADKEEPER_*)."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    return {**keep, **extra}


def _one_line_refusal(result: object, code: int) -> str:
    assert getattr(result, "returncode", None) == code, result
    stderr: str = getattr(result, "stderr", "")
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("threadkeeper: "), stderr
    return lines[0]


def test_version() -> None:
    out = app_run(["--version"], _env())
    assert out.returncode == 0
    assert out.stdout.strip().startswith("threadkeeper 0.")


def test_settings_are_printed_with_secrets_masked() -> None:
    env = _env(
        DATABASE_URL="postgresql://tk:db-password-1@db.internal:5433/tk",
        THREADKEEPER_API_KEYS="alice:alice-secret-key,bob:bob-secret-key",
        THREADKEEPER_LLM_API_KEY="sk-provider-secret",
        THREADKEEPER_SUMMARY_THRESHOLD="9000",
    )
    out = app_run(["settings"], env)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    assert lines["THREADKEEPER_SUMMARY_THRESHOLD"] == "9000"  # the effective value
    assert lines["THREADKEEPER_DB_POOL_SIZE"] == "40"  # defaults are listed too
    assert lines["THREADKEEPER_API_KEYS"] == "alice:****,bob:****"
    assert lines["THREADKEEPER_LLM_API_KEY"] == "****"
    assert lines["DATABASE_URL"] == "postgresql://tk:***@db.internal:5433/tk"
    for secret in ("db-password-1", "alice-secret-key", "bob-secret-key", "sk-provider-secret"):
        assert secret not in out.stdout + out.stderr


@pytest.mark.parametrize("command", [["serve"], ["worker"], ["migrate"]])
def test_a_non_postgresql_url_is_refused_in_one_line(command: list[str]) -> None:
    out = app_run(command, _env(DATABASE_URL="mysql://tk:pw@127.0.0.1:3306/tk"))
    line = _one_line_refusal(out, 2)
    assert "must be a PostgreSQL URL" in line and "mysql://" in line
    assert "pw@" not in line


@pytest.mark.parametrize("command", [["serve"], ["worker"], ["migrate"]])
def test_an_unreachable_database_fails_fast_in_one_line(command: list[str]) -> None:
    port = free_port()  # nothing listens there
    env = _env(
        DATABASE_URL=f"postgresql://tk:db-password-1@127.0.0.1:{port}/tk",
        THREADKEEPER_DB_STARTUP_TIMEOUT_SECONDS="1",
    )
    line = _one_line_refusal(app_run(command, env, timeout=90), 1)
    assert f"127.0.0.1:{port}/tk did not answer within 1 s" in line
    assert "db-password-1" not in line


async def test_access_log_names_the_principal_and_the_error_code(
    clean_db: str, tmp_path: Path
) -> None:
    log_file = tmp_path / "server.log"
    env = {
        "DATABASE_URL": clean_db,
        "THREADKEEPER_API_KEYS": f"alice:{API_KEY}",
        "THREADKEEPER_LOG_JSON": "true",
        "THREADKEEPER_WORKDIR_ROOT": str(tmp_path / "wd"),
    }
    async with (
        served(env, log_file, inherit_settings=False) as (base_url, _),
        httpx.AsyncClient(base_url=base_url) as client,
    ):
        missing = await client.get(f"/v1/threads/{uuid.uuid4()}", headers=AUTH)
        assert missing.status_code == 404
        anonymous = await client.get("/v1/threads")
        assert anonymous.status_code == 401
        ok = await client.get("/v1/threads", headers=AUTH)
        assert ok.status_code == 200
        metrics = (await client.get("/metrics")).text
    access, gc_policy = {}, []
    for line in log_file.read_text().splitlines():
        event = json.loads(line) if line.startswith("{") else {}
        if event.get("event") == "http_request":
            access[event["request_id"]] = event
        if event.get("event") == "serving_gc":
            gc_policy.append(event)
    # The serving process's GC policy (app/gc_policy.py): its startup heap frozen once, after the
    # container was built, and its collections timed.
    assert len(gc_policy) == 1, gc_policy
    assert gc_policy[0]["frozen_objects"] > 100_000
    assert gc_policy[0]["thresholds"][0] > 700
    assert 'threadkeeper_gc_seconds_total{generation="2"}' in metrics
    assert access[missing.headers["x-request-id"]]["principal"] == "alice"
    assert access[missing.headers["x-request-id"]]["error"] == "not_found"
    assert access[anonymous.headers["x-request-id"]]["principal"] is None
    assert access[anonymous.headers["x-request-id"]]["error"] == "unauthorized"
    assert access[ok.headers["x-request-id"]]["principal"] == "alice"
    assert access[ok.headers["x-request-id"]]["error"] is None
