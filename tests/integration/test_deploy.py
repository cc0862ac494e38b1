"""Production packaging: compose file, image inputs, /ready before migrations, bind safety."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from ruamel.yaml import YAML

from app.config import Settings, load_settings
from app.container import Container, build_container
from app.db.migrate import upgrade_head
from app.main import create_app
from tests.support.api import BODIES, concrete_path, openapi_operations
from tests.support.app_harness import AUTH, AppHarness, make_settings
from tests.support.database import fresh_database
from tests.support.processes import (
    ROOT,
    app_process,
    app_run,
    free_port,
    reaped,
    wait_exit,
    wait_ready,
)

pytestmark = pytest.mark.integration

COMPOSE = ROOT / "deploy" / "docker-compose.yml"
#: The PgBouncer override, run on top of COMPOSE.
COMPOSE_PGBOUNCER = ROOT / "deploy" / "docker-compose.pgbouncer.yml"
#: Packages that exist only for tests and development: none of them may ship in the image.
DEV_ONLY = (
    "pytest",
    "pytest-xdist",
    "execnet",
    "ruff",
    "mypy",
    "playwright",
    "schemathesis",
    "moto",
    "testcontainers",
)


def _lock(path: Path) -> dict[str, str]:
    pins = re.findall(r"^([A-Za-z0-9_.\-\[\]]+)==(\S+)", path.read_text(), flags=re.M)
    return {name.lower(): version for name, version in pins}


@pytest.mark.slow  # real validator processes
def test_compose_file_is_valid_against_the_compose_spec(tmp_path: Path) -> None:
    """check-jsonschema ships the official compose-spec schema (with its license)."""
    check = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec"]
    ok = subprocess.run(
        [*check, str(COMPOSE), str(COMPOSE_PGBOUNCER)], capture_output=True, text=True, timeout=120
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # The validator really validates: a misspelt key is refused.
    broken = tmp_path / "broken.yml"
    broken.write_text(COMPOSE.read_text().replace("depends_on:", "dependson:"))
    bad = subprocess.run([*check, str(broken)], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "dependson" in bad.stdout
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    ):
        cfg = subprocess.run(
            [docker, "compose", "-f", str(COMPOSE), "-f", str(COMPOSE_PGBOUNCER), "config", "-q"],
            capture_output=True,
            text=True,
            env={"THREADKEEPER_API_KEYS": "alice:not-the-dev-key", "PATH": "/usr/bin:/bin"},
            timeout=120,
        )
        assert cfg.returncode == 0, cfg.stderr


def test_compose_migrates_once_before_api_and_worker_with_their_own_checks() -> None:
    spec = YAML(typ="safe").load(COMPOSE.read_text())
    services = spec["services"]
    assert services["migrate"]["command"] == ["python", "-m", "app", "migrate"]
    for name in ("api", "worker"):
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }
        assert "--migrate" not in services[name]["command"]
        assert services[name]["environment"]["THREADKEEPER_API_KEYS"].startswith(
            "${THREADKEEPER_API_KEYS:?"
        )
    assert services["worker"]["healthcheck"]["test"] == [
        "CMD",
        "python",
        "-m",
        "app",
        "worker",
        "--check",
    ]
    assert "/ready" in " ".join(services["api"]["healthcheck"]["test"])
    assert services["migrate"]["image"] == services["api"]["image"] == services["worker"]["image"]


def test_the_pgbouncer_override_sends_the_pools_through_it_and_listen_around_it() -> None:
    base = YAML(typ="safe").load(COMPOSE.read_text())["services"]
    over = YAML(typ="safe").load(COMPOSE_PGBOUNCER.read_text())["services"]
    bouncer = over["pgbouncer"]["environment"]
    assert bouncer["POOL_MODE"] == "transaction" and bouncer["DB_HOST"] == "postgres"
    for name in ("api", "worker"):
        env = over[name]["environment"]
        assert env["THREADKEEPER_DATABASE_POOLER"] == "transaction"
        assert "@pgbouncer:" in env["DATABASE_URL"]
        assert "@postgres:" in env["THREADKEEPER_DATABASE_DIRECT_URL"]
        assert over[name]["depends_on"]["pgbouncer"] == {"condition": "service_started"}
    # Migrations keep the base file's URL straight to PostgreSQL.
    assert "migrate" not in over
    assert "@postgres:" in base["migrate"]["environment"]["DATABASE_URL"]


def test_compose_restarts_long_running_services_and_exposes_the_worker_metrics() -> None:
    services = YAML(typ="safe").load(COMPOSE.read_text())["services"]
    for name in ("postgres", "api", "worker"):
        assert services[name]["restart"] == "unless-stopped", name
    assert services["migrate"]["restart"] == "no"  # one-shot: a failure must stay visible
    worker = services["worker"]
    port = worker["environment"]["THREADKEEPER_WORKER_METRICS_PORT"]
    assert f"{port}:{port}" in worker["ports"]
    # The merge kept the shared environment (the worker still reaches the database).
    assert worker["environment"]["DATABASE_URL"].startswith("postgresql://")


def test_image_installs_the_runtime_lock_only_and_runs_as_non_root() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "-r requirements.runtime.lock" in dockerfile
    assert "requirements.lock" not in dockerfile.replace("requirements.runtime.lock", "")
    assert "--extra dev" not in dockerfile
    runtime = dockerfile.split("AS runtime", 1)[1]
    assert re.search(r"^USER (?!root|0\b)\S+", runtime, flags=re.M)
    runtime_pins, all_pins = (
        _lock(ROOT / "requirements.runtime.lock"),
        _lock(ROOT / "requirements.lock"),
    )
    for dev in DEV_ONLY:
        assert dev not in runtime_pins, dev
    # Same versions as the full lock (the runtime lock is compiled against it).
    for name, version in runtime_pins.items():
        assert all_pins.get(name) == version, name
    ignored = (ROOT / ".dockerignore").read_text().split()
    for entry in (".git", ".venv", "tests/", "var/", ".env"):
        assert entry in ignored


async def test_ready_is_503_until_the_schema_is_at_head(database_url: str, tmp_path: Path) -> None:
    with fresh_database(database_url) as empty:
        settings = make_settings(empty, tmp_path / "wd")

        async def container_factory(s: Settings) -> Container:
            return await build_container(s, start_worker=False)

        app = create_app(settings, container_factory=container_factory)
        async with app.lifespan():
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                before = await client.get("/ready")
                assert before.status_code == 503
                assert before.json()["status"] == "migrating"
                await asyncio.to_thread(upgrade_head, empty)
                after = await client.get("/ready")
                assert after.status_code == 200, after.text


async def test_every_v1_route_is_a_clean_503_until_the_schema_is_migrated(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A service started before ``python -m app migrate`` answered 500 with a traceback per
    request (a missing table); now 503 ``database_not_migrated`` and one log line, like /ready."""
    with fresh_database(database_url) as empty:
        settings = make_settings(empty, tmp_path / "wd", log_json=True, log_level="INFO")

        async def container_factory(s: Settings) -> Container:
            return await build_container(s, start_worker=False)

        app = create_app(settings, container_factory=container_factory)
        async with app.lifespan():
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                h = AppHarness(app, client)
                ops = [o for o in await openapi_operations(h) if o[1].startswith("/v1/")]
                assert len(ops) > 10
                capsys.readouterr()
                for method, path, op in ops:
                    body = BODIES.get(op["operationId"])
                    resp = await client.request(
                        method, concrete_path(path), json=body, headers=AUTH
                    )
                    assert resp.status_code == 503, (op["operationId"], resp.text)
                    assert resp.json()["error"] == "database_not_migrated"
                    assert "migrate" in resp.json()["detail"]
                    assert resp.headers["retry-after"] == "2"
                    assert "503" in op["responses"], op["operationId"]  # documented
                logged = capsys.readouterr().err
                lines = [json.loads(line) for line in logged.splitlines() if line.startswith("{")]
                refused = [e for e in lines if e["event"] == "database_not_migrated"]
                assert len(refused) == len(ops), logged[-3000:]
                assert "Traceback" not in logged and "unhandled_error" not in logged
                # Migrated while running: served from the next request on.
                await asyncio.to_thread(upgrade_head, empty)
                created = await client.post("/v1/threads", json={"title": "t"}, headers=AUTH)
                assert created.status_code == 201, created.text
                listed = await client.get("/v1/threads", headers=AUTH)
                assert [t["id"] for t in listed.json()["items"]] == [created.json()["id"]]


@pytest.mark.slow  # a real process
def test_default_dev_key_is_refused_off_loopback() -> None:
    for host in ("127.0.0.1", "::1", "localhost"):
        assert load_settings({"THREADKEEPER_HOST": host}).http.host == host
    with pytest.raises(ValueError, match="dev-key"):
        load_settings({"THREADKEEPER_HOST": "0.0.0.0"})
    # Real keys on a public address are fine.
    public = load_settings({"THREADKEEPER_HOST": "0.0.0.0", "THREADKEEPER_API_KEYS": "a:k-1"})
    assert public.http.host == "0.0.0.0"
    proc = app_run(
        ["serve", "--host", "0.0.0.0"],
        {"PATH": "/usr/bin:/bin", "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"},
    )
    assert proc.returncode == 2
    assert "dev-key" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow  # a real process
async def test_sigterm_of_serve_exits_normally_so_atexit_stops_embedded_postgres(
    clean_db: str, tmp_path: Path
) -> None:
    """uvicorn re-raises SIGTERM after its graceful shutdown; with the default action the process
    died before atexit ran, and pgserver stops the embedded PostgreSQL in an atexit handler.
    ``scripts/serve.sh`` execs this same command, so the signal reaches it directly."""
    assert "exec .venv/bin/python -m app serve" in (ROOT / "scripts" / "serve.sh").read_text()
    port = free_port()
    log = tmp_path / "serve.log"
    proc = app_process(
        ["serve", "--port", str(port)],
        {
            "DATABASE_URL": clean_db,
            "THREADKEEPER_WORKDIR_ROOT": str(tmp_path / "wd"),
            "THREADKEEPER_LOG_JSON": "true",
        },
        log,
    )
    with reaped(proc):
        await wait_ready(f"http://127.0.0.1:{port}", proc, log)
        proc.send_signal(signal.SIGTERM)
        assert await wait_exit(proc, 120) == 0, log.read_text()[-3000:]
