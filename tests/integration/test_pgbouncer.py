"""Behind a real PgBouncer in transaction mode (tests/support/pgbouncer.py): with
``THREADKEEPER_DATABASE_POOLER=transaction`` every connection is safe there (no named prepared
statement outlives its transaction, no session state), migrations and the checkpointer's setup
go through it, and without ``THREADKEEPER_DATABASE_DIRECT_URL`` the NOTIFY-driven paths poll
(said once at start) while with it they listen on the direct URL.

The ``single`` database of the bouncer has ONE server connection shared by every client, so
whatever one client leaves on it (a named statement) is there for the next: the tests read
``pg_prepared_statements`` through it."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from app.db.driver import driver
from app.db.migrate import upgrade_head
from app.db.session import autocommit, create_engine
from tests.support.api import new_thread, run_turns, seed_kb, state
from tests.support.app_harness import AUTH, AppFactory
from tests.support.corpus import BIG
from tests.support.database import fresh_database
from tests.support.pgbouncer import Bouncer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NAMED_STATEMENTS = "SELECT count(*) FROM pg_prepared_statements"
#: What ``_engine_round`` reads.
ROUND = [1, 1, 2, 2, 3, 3, 0, 10, 20, 0, 100, 200]


def _named_statements_left(bouncer: Bouncer) -> int:
    """Named prepared statements on the ``single`` server connection (any client's)."""
    with psycopg.connect(bouncer.url("single"), prepare_threshold=None, autocommit=True) as conn:
        row = conn.execute(NAMED_STATEMENTS).fetchone()
        assert row is not None
        return int(row[0])


def _discard_all(bouncer: Bouncer) -> None:
    with psycopg.connect(bouncer.url("single"), prepare_threshold=None, autocommit=True) as conn:
        conn.execute("DEALLOCATE ALL")


async def _engine_round(url: str, *, pooler: bool) -> list[int]:
    """Two pooled connections taking turns (transactions, the hot paths' autocommit() and the
    worker's driver path)."""
    engine = create_engine(url, pool_size=2, transaction_pooler=pooler)
    seen: list[int] = []
    try:
        async with engine.connect() as a, engine.connect() as b:
            for i in range(3):
                for conn in (a, b):
                    seen.append(int(await conn.scalar(text("SELECT :i + 1"), {"i": i})))
                    await conn.commit()
        for i in range(3):
            async with autocommit(engine) as conn:
                seen.append(int(await conn.scalar(text("SELECT :i * 10"), {"i": i})))
        for i in range(3):  # the worker's hot path (app/db/driver.py)
            async with driver(engine) as conn:
                seen.append(int(await conn.scalar(text("SELECT CAST(:i AS int) * 100"), {"i": i})))
    finally:
        await engine.dispose()
    return seen


async def test_the_repositories_leave_no_named_statement_behind(bouncer: Bouncer) -> None:
    """Without the setting, SQLAlchemy's asyncpg leaves its cached named statements on the
    shared server connection (the issue's ``__asyncpg_stmt_46__ does not exist`` waiting to
    happen once another server connection serves the next transaction); with it, none."""
    _discard_all(bouncer)
    assert await _engine_round(bouncer.url("single"), pooler=False) == ROUND
    assert _named_statements_left(bouncer) > 0
    _discard_all(bouncer)
    assert await _engine_round(bouncer.url("single"), pooler=True) == ROUND
    assert _named_statements_left(bouncer) == 0


def test_the_checkpointers_named_statements_collide_without_the_setting(bouncer: Bouncer) -> None:
    """psycopg with ``prepare_threshold=0`` (the direct setting) names its statements per
    connection (``_pg3_0``...): two clients meeting on one server connection collide, which is
    the checkpointer's failure in the issue. ``prepare_threshold=None`` (the pooler setting)
    never names one."""
    _discard_all(bouncer)
    url = bouncer.url("single")
    with (
        psycopg.connect(url, prepare_threshold=0, autocommit=True) as one,
        psycopg.connect(url, prepare_threshold=0, autocommit=True) as two,
    ):
        one.execute("SELECT %s::int", (1,))
        with pytest.raises(psycopg.errors.DuplicatePreparedStatement):
            two.execute("SELECT %s::int", (2,))
    _discard_all(bouncer)
    with (
        psycopg.connect(url, prepare_threshold=None, autocommit=True) as one,
        psycopg.connect(url, prepare_threshold=None, autocommit=True) as two,
    ):
        for i in range(5):
            assert one.execute("SELECT %s::int", (i,)).fetchone() == (i,)
            assert two.execute("SELECT %s::int", (i,)).fetchone() == (i,)
    assert _named_statements_left(bouncer) == 0


async def test_migrations_and_checkpointer_setup_through_the_pooler(
    bouncer: Bouncer, database_url: str, app_factory: AppFactory
) -> None:
    """No direct URL: ``migrate`` runs through PgBouncer (one transaction, pooler-safe
    statements) on a fresh database, then the service starts on it (the checkpointer's setup
    under its transaction-level lock) and answers."""
    with fresh_database(database_url) as fresh:
        name = str(make_url(fresh).database)
        await asyncio.to_thread(upgrade_head, bouncer.url(name), transaction_pooler=True)
        with psycopg.connect(fresh, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM alembic_version").fetchone()
            assert row == (1,)
        async with app_factory(database_url=bouncer.url(name), database_pooler="transaction") as h:
            tid = await new_thread(h)
            await run_turns(h, tid, ["hello through the pooler"])
        with psycopg.connect(fresh, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) > 0 FROM checkpoint_migrations").fetchone()
            assert row == (True,)


def notifications_off(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The ``database_notifications_off`` lines, read from the stdlib records every structlog
    line ends in (``structlog.testing.capture_logs`` misses loggers an earlier test in the same
    worker already cached)."""
    return [
        r.msg
        for r in caplog.records
        if isinstance(r.msg, dict) and r.msg.get("event") == "database_notifications_off"
    ]


async def test_without_a_direct_url_streams_and_workers_poll_and_say_so_once(
    bouncer: Bouncer, app_factory: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Concurrent turns on several threads through six shared server connections: every run
    completes, agent state reads and manual compression work, the listener never starts, and
    the start says once that notifications are off."""
    async with app_factory(database_url=bouncer.url(), database_pooler="transaction", **BIG) as h:
        assert h.container.notifier.connected.is_set() is False
        await seed_kb(h)
        tids = [await new_thread(h) for _ in range(4)]
        await asyncio.gather(
            *(run_turns(h, tid, ["how does a lease expire?", "heartbeat?"]) for tid in tids)
        )
        for tid in tids:
            assert len((await state(h, tid))["messages"]) >= 4
        resp = await h.client.post(f"/v1/threads/{tids[0]}/context/compress", headers=AUTH)
        assert resp.status_code == 200, resp.text
        events = await h.sse_events((await h.run_ids(tids[1]))[0])
        assert events and events[-1]["data"]["status"] == "completed", events[-3:]
    off = notifications_off(caplog)
    assert len(off) == 1, off
    assert "THREADKEEPER_DATABASE_DIRECT_URL" in off[0]["reason"]


async def test_with_a_direct_url_the_listener_uses_it(
    bouncer: Bouncer,
    database_url: str,
    app_factory: AppFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    overrides: dict[str, Any] = {
        "database_url": bouncer.url(),
        "database_pooler": "transaction",
        "database_direct_url": database_url,
    }
    async with app_factory(**overrides) as h:
        await asyncio.wait_for(h.container.notifier.connected.wait(), 30)
        tid = await new_thread(h)
        await run_turns(h, tid, ["hello"])
        # The listener's session is on PostgreSQL itself: it is not among the bouncer's
        # clients (SHOW CLIENTS on the admin console lists each client's application name).
        with psycopg.connect(
            bouncer.url("pgbouncer"),
            autocommit=True,
            cursor_factory=psycopg.ClientCursor,  # the admin console: simple queries only
        ) as admin:
            cur = admin.execute("SHOW CLIENTS")
            cols = [c.name for c in cur.description or []]
            apps = {dict(zip(cols, r, strict=False)).get("application_name") for r in cur}
        assert "threadkeeper-sql" in apps and "threadkeeper-checkpointer" in apps, apps
        assert "threadkeeper-listener" not in apps
    assert not notifications_off(caplog)
