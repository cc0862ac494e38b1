"""The hot path's statements on the driver itself (app/db/driver.py): the repositories' ``text()``
statements with their named parameters, on a checkout of the same bounded pool, a dead or
cancelled connection never lent again, lock timeouts still ``ThreadBusy``, one transaction
behind a pooler, and a span per statement when tracing is on."""

from __future__ import annotations

import asyncio
import json
import uuid

import asyncpg
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import text
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import greenlet_spawn

from app.db.driver import driver, trace_statements
from app.db.errors import is_connection_error
from app.db.models import AgentRun
from app.db.run_events import DeltaEvent
from app.db.session import create_engine, create_session_factory
from app.domain.errors import ThreadBusy
from app.worker.ledger import RunLedger
from tests.support.runs import HOLDER, started

pytestmark = pytest.mark.integration

ECHO = text(
    """-- echo: a statement of the tests
SELECT CAST(:a AS int) + CAST(:a AS int) AS twice, CAST(:doc AS jsonb) -> 'k' AS k,
    CAST(:id AS uuid) AS id, :name AS name
"""
)
NONE = text("SELECT 1 AS one WHERE CAST(:flag AS boolean)")


async def backend_pid(engine: AsyncEngine) -> int:
    async with driver(engine) as conn:
        return int(await conn.scalar(text("SELECT pg_backend_pid()")))


async def test_named_parameters_and_rows_as_sqlalchemy_gives_them(engine: AsyncEngine) -> None:
    ident = uuid.uuid4()
    async with driver(engine) as conn:
        row = (
            await conn.execute(
                ECHO, {"a": 21, "doc": json.dumps({"k": [1]}), "id": ident, "name": "x"}
            )
        ).one()
        assert (row.twice, row.k, row.id, row.name) == (42, [1], ident, "x")
        assert row[0] == 42 and row["name"] == "x"
        with pytest.raises(AttributeError):
            _ = row.missing
        assert (await conn.execute(NONE, {"flag": False})).first() is None
        assert (await conn.execute(NONE, {"flag": False})).all() == []
        assert await conn.scalar(NONE, {"flag": False}) is None
        with pytest.raises(LookupError):
            (await conn.execute(NONE, {"flag": False})).one()
        assert [r.one for r in (await conn.execute(NONE, {"flag": True})).all()] == [1]


async def test_a_driver_connection_is_a_checkout_of_the_same_bounded_pool(clean_db: str) -> None:
    engine = create_engine(clean_db, pool_size=1, timeout_seconds=0.3)
    try:
        async with driver(engine):
            assert engine.pool.checkedout() == 1  # type: ignore[attr-defined]
            with pytest.raises(PoolTimeout):
                async with driver(engine):
                    pass
        assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
        async with driver(engine) as conn:  # lent again, and it works
            assert await conn.scalar(text("SELECT 1")) == 1
    finally:
        await engine.dispose()


async def test_a_connection_that_failed_is_replaced_not_lent_again(engine: AsyncEngine) -> None:
    first = await backend_pid(engine)
    with pytest.raises(Exception) as failed:
        async with driver(engine) as conn:
            await conn.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))
    assert is_connection_error(failed.value), repr(failed.value)
    assert await backend_pid(engine) != first


async def test_a_statement_cancelled_in_flight_discards_its_connection(
    engine: AsyncEngine,
) -> None:
    first = await backend_pid(engine)

    async def sleep() -> None:
        async with driver(engine) as conn:
            await conn.execute(text("SELECT pg_sleep(30)"))

    task = asyncio.create_task(sleep())
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await backend_pid(engine) != first
    async with driver(engine) as conn:  # the cancelled statement does not run on
        sleeping = await conn.scalar(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' "
                "AND state = 'active'"
            )
        )
    assert sleeping == 0


async def test_a_step_that_waits_out_its_lock_timeout_is_thread_busy(engine: AsyncEngine) -> None:
    sessions = create_session_factory(engine)
    run_id = await started(sessions)
    async with sessions() as session:
        run = await session.get(AgentRun, run_id)
        assert run is not None
        thread_id = run.thread_id
    ledger = RunLedger(sessions, HOLDER, lease_seconds=0.3, engine=engine)
    delta = DeltaEvent(type="delta", lc_id="m1", text="hi")
    async with sessions() as holder, holder.begin():  # another operation holds the thread
        await holder.execute(
            text("SELECT 1 FROM conversations WHERE id = :id FOR UPDATE"), {"id": thread_id}
        )
        with pytest.raises(ThreadBusy):
            await ledger.write_step(thread_id, run_id, events=[delta])
    await ledger.write_step(thread_id, run_id, events=[delta])  # free again: written


async def test_behind_a_transaction_pooler_each_use_is_one_transaction(clean_db: str) -> None:
    direct = create_engine(clean_db)
    pooled = create_engine(clean_db, transaction_pooler=True)
    try:
        async with driver(direct) as conn:
            assert not conn.raw.is_in_transaction()
        async with driver(direct, transaction=True) as conn:
            assert conn.raw.is_in_transaction()
        async with driver(pooled) as conn:
            assert conn.raw.is_in_transaction()
            # Unnamed statements only (asyncpg's cache is off there): nothing outlives it.
            await conn.execute(ECHO, {"a": 1, "doc": "{}", "id": uuid.uuid4(), "name": "p"})
            assert await conn.scalar(text("SELECT count(*) FROM pg_prepared_statements")) == 0
    finally:
        await direct.dispose()
        await pooled.dispose()


async def test_each_driver_statement_is_a_span_when_tracing_is_on(clean_db: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    engine = create_engine(clean_db)
    trace_statements(engine, provider.get_tracer("test"))
    try:
        async with driver(engine) as conn:
            await conn.execute(ECHO, {"a": 1, "doc": "{}", "id": uuid.uuid4(), "name": "t"})
    finally:
        await engine.dispose()
    (span,) = exporter.get_finished_spans()
    assert span.name == "echo"
    assert span.attributes is not None
    assert span.attributes["db.system"] == "postgresql"
    assert "CAST($1 AS int) + CAST($1 AS int)" in str(span.attributes["db.statement"])


async def test_a_unique_violation_is_the_drivers_own_error(engine: AsyncEngine) -> None:
    """The claim's belt-and-braces catch (app/worker/claims.py) sees asyncpg's class."""
    async with driver(engine) as conn:
        await conn.execute(text("CREATE TEMP TABLE once (k int PRIMARY KEY)"))
        await conn.execute(text("INSERT INTO once VALUES (1)"))
        with pytest.raises(asyncpg.IntegrityConstraintViolationError):
            await conn.execute(text("INSERT INTO once VALUES (1)"))


async def test_an_sql_error_in_a_transaction_rolls_back_and_keeps_the_connection(
    engine: AsyncEngine,
) -> None:
    first = await backend_pid(engine)
    with pytest.raises(asyncpg.DivisionByZeroError):
        async with driver(engine, transaction=True) as conn:
            await conn.execute(text("CREATE TEMP TABLE undone (k int)"))
            await conn.execute(text("SELECT 1 / 0"))
    async with driver(engine) as conn:
        assert int(await conn.scalar(text("SELECT pg_backend_pid()"))) == first
        assert not conn.raw.is_in_transaction()
        assert await conn.scalar(text("SELECT to_regclass('pg_temp.undone')")) is None


async def test_a_connection_error_replaces_the_older_connections_too(clean_db: str) -> None:
    """As SQLAlchemy does on a disconnect: after a failover the pool's other connections are
    as dead as the one that failed, and a run's statements would fail on each in turn."""
    engine = create_engine(clean_db, pool_size=2)
    try:
        held = [await engine.raw_connection() for _ in range(2)]
        older = {await c.driver_connection.fetchval("SELECT pg_backend_pid()") for c in held}
        for c in held:
            await greenlet_spawn(c.close)
        with pytest.raises(Exception) as failed:
            async with driver(engine) as conn:
                await conn.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))
        assert is_connection_error(failed.value)
        async with driver(engine) as a, driver(engine) as b:  # both connections, both new
            now = {int(await c.scalar(text("SELECT pg_backend_pid()"))) for c in (a, b)}
        assert not now & older, (now, older)
    finally:
        await engine.dispose()


async def test_a_transaction_cancelled_in_flight_leaves_nothing_open(engine: AsyncEngine) -> None:
    async def sleep() -> None:
        async with driver(engine, transaction=True) as conn:
            await conn.execute(text("SELECT pg_sleep(30)"))

    task = asyncio.create_task(sleep())
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)  # discarded, not rolled back: no wait for the server
    async with driver(engine) as conn:
        open_ = await conn.scalar(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND (state LIKE 'idle in transaction%' OR query = 'SELECT pg_sleep(30)')"
            )
        )
    assert open_ == 0
