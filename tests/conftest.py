"""Shared fixtures: one fresh PostgreSQL database per session, a clean slate per test."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.errors import UNDECLARED
from app.config import Settings
from app.container import Container, build_container
from app.db.migrate import upgrade_head
from app.db.session import create_engine
from app.db.urls import libpq_url
from app.main import create_app
from tests.support.app_harness import AppFactory, AppHarness, make_settings
from tests.support.database import fresh_database, server_url
from tests.support.openai_server import OpenAICompatibleServer
from tests.support.pgbouncer import Bouncer, pgbouncer
from tests.support.s3_server import S3Server, run_s3_server
from tests.support.schedule import slow_first


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


@pytest.fixture(scope="session")
def bouncer(database_url: str) -> Iterator[Bouncer]:
    """A real PgBouncer in transaction mode in front of the session's database (its own process,
    tests/support/pgbouncer.py)."""
    with pgbouncer(database_url) as made:
        yield made


@pytest.fixture(params=["direct", "pgbouncer"])
def database_route(request: pytest.FixtureRequest) -> dict[str, Any]:
    """``app_factory`` overrides per way to the database: straight to PostgreSQL, or through
    PgBouncer in transaction mode (``THREADKEEPER_DATABASE_POOLER=transaction``, LISTEN on the
    direct URL). A test taking this runs on both."""
    if request.param == "direct":
        return {}
    made: Bouncer = request.getfixturevalue("bouncer")
    return {
        "database_url": made.url(),
        "database_pooler": "transaction",
        "database_direct_url": request.getfixturevalue("database_url"),
    }


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAICompatibleServer]:
    """The local OpenAI-protocol provider, where the example graphs' ``ChatOpenAI`` finds it
    (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``)."""
    with OpenAICompatibleServer() as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        yield srv


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


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, slow tests first in each worker's share, a module at a time
    (tests/support/schedule.py); last, once ``-k``/``-m``/``--deselect`` removed theirs."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return
    items[:] = slow_first(
        items,
        int(workerinput["workercount"]),
        lambda i: i.get_closest_marker("slow") is not None,
        group=lambda i: i.nodeid.split("::", 1)[0],
    )
