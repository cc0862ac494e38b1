"""Shared fixtures: one fresh PostgreSQL database per session, a clean slate per test."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.errors import UNDECLARED
from app.config import Settings, load_settings
from app.container import Container, build_container
from app.db.migrate import upgrade_head
from app.db.session import create_engine
from app.db.urls import libpq_url
from app.main import create_app
from tests.support.database import fresh_database, server_url
from tests.support.s3_server import S3Server, run_s3_server

API_KEY = "test-key-alice"
OTHER_KEY = "test-key-bob"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
OTHER_AUTH = {"Authorization": f"Bearer {OTHER_KEY}"}


@pytest.fixture(scope="session", autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """Apps built by tests point the root logger at pytest's capture stream, which is closed
    when the session ends; the embedded PostgreSQL logs its shutdown from an atexit handler
    after that ("--- Logging error ---" four times). Hand the root logger back as we found it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers = handlers
    root.setLevel(level)


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    with server_url() as server, fresh_database(server) as url:
        upgrade_head(url)
        yield url


def _truncate_all(url: str) -> None:
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                "AND tablename <> 'alembic_version' AND tablename <> 'checkpoint_migrations'"
            ).fetchall()
        ]
        if tables:
            conn.execute("TRUNCATE " + ", ".join(f'"{t}"' for t in tables) + " CASCADE")


@pytest.fixture
def clean_db(database_url: str) -> str:
    _truncate_all(database_url)
    return database_url


@pytest.fixture
async def engine(clean_db: str) -> AsyncIterator[AsyncEngine]:
    """The service's SQLAlchemy engine on the clean database, disposed afterwards."""
    made = create_engine(clean_db)
    try:
        yield made
    finally:
        await made.dispose()


def make_settings(database_url: str, workdir: Path, **overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "database_url": database_url,
        "workdir_root": str(workdir),
        "api_keys": f"alice:{API_KEY},bob:{OTHER_KEY}",
        "log_json": False,
        "log_level": "WARNING",
        "worker_poll_seconds": 0.05,
        "heartbeat_seconds": 0.5,
        # Long enough that a starved event loop (several suites on 2 shared cores) misses no
        # heartbeat; tests about lease expiry set their own lease or expire it in SQL.
        "lease_seconds": 30.0,
        "lock_timeout_ms": 2000,
        "db_pool_size": 10,
        # Tests poll in tight loops; the limiter has its own test.
        "rate_limit_per_second": 0,
        "drain_seconds": 0,
    }
    base.update(overrides)
    return load_settings({}, **base)


class AppHarness:
    """A running app (lifespan entered) with an httpx client on its ASGI interface."""

    def __init__(self, app: Any, client: httpx.AsyncClient) -> None:
        self.app = app
        self.client = client

    @property
    def container(self) -> Container:
        return self.app.state.container  # type: ignore[no-any-return]

    async def run_ids(self, thread_id: str) -> list[str]:
        """Ids of the thread's runs, newest first."""
        resp = await self.client.get(f"/v1/threads/{thread_id}/runs", headers=AUTH)
        return [r["id"] for r in resp.json()["items"]]

    async def sse_events(
        self, run_id: str, *, last_event_id: str | None = None
    ) -> list[dict[str, Any]]:
        """Every event of a run's SSE stream as ``{"event", "id", "data"}`` (data parsed)."""
        headers = {**AUTH, **({"Last-Event-ID": last_event_id} if last_event_id else {})}
        events: list[dict[str, Any]] = []
        current: dict[str, str] = {}
        async with self.client.stream("GET", f"/v1/runs/{run_id}/events", headers=headers) as r:
            assert r.status_code == 200, r.status_code
            async for line in r.aiter_lines():
                if not line:
                    if "data" in current:
                        events.append(
                            {
                                "event": current.get("event"),
                                "id": current.get("id"),
                                "data": json.loads(current["data"]),
                            }
                        )
                    current = {}
                    continue
                key, _, value = line.partition(":")
                if key in ("event", "data", "id"):
                    current[key] = value.strip()
        return events

    async def wait_for_run(
        self,
        thread_id: str,
        *,
        statuses: set[str],
        timeout: float = 30.0,
        exclude: set[str] | None = None,
    ) -> dict[str, Any]:
        """The newest run of the thread once it is in one of ``statuses`` (``exclude``: run ids)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            resp = await self.client.get(f"/v1/threads/{thread_id}/runs", headers=AUTH)
            items = [r for r in resp.json()["items"] if r["id"] not in (exclude or set())]
            if items and items[0]["status"] in statuses:
                return items[0]  # type: ignore[no-any-return]
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"run did not reach {statuses}: {items}")
            await asyncio.sleep(0.05)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A real S3 HTTP server on loopback, shared by the session (one bucket per test)."""
    yield from run_s3_server()


@pytest.fixture(params=["local", "s3"])
def workdir_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Settings overrides per Workdir backend: every Workdir test runs on both."""
    if request.param == "local":
        return {}
    server: S3Server = request.getfixturevalue("aws_s3")
    return server.settings(server.new_bucket())


@pytest.fixture
def aws_s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The S3 server, named by the standard ``AWS_*`` variables of this process (obstore reads
    them when a Workdir is opened)."""
    for name, value in s3_server.aws_env().items():
        monkeypatch.setenv(name, value)
    return s3_server


AppFactory = Callable[..., contextlib.AbstractAsyncContextManager[AppHarness]]


@pytest.fixture
def app_factory(clean_db: str, tmp_path: Path) -> AppFactory:
    @contextlib.asynccontextmanager
    async def factory(
        *,
        summarizer: Any = None,
        model: Any = None,
        start_worker: bool = True,
        database_url: str | None = None,
        span_exporter: Any = None,
        **overrides: Any,
    ) -> AsyncIterator[AppHarness]:
        """``database_url``: reach the test database another way (e.g. through a proxy)."""
        settings = make_settings(database_url or clean_db, tmp_path / "workdir", **overrides)

        async def container_factory(s: Settings) -> Container:
            return await build_container(
                s, summarizer=summarizer, model=model, start_worker=start_worker
            )

        app = create_app(settings, container_factory=container_factory, span_exporter=span_exporter)
        seen = len(UNDECLARED)
        async with app.lifespan():
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://testserver"
            ) as client:
                yield AppHarness(app, client)
        # Every error the app answered is one its operation declares in the OpenAPI document.
        assert UNDECLARED[seen:] == [], f"answered but not declared: {UNDECLARED[seen:]}"

    return factory
