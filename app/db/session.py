"""Engine and session factory. Services own the unit of work; repositories only use the session."""

from __future__ import annotations

import time
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import Any

import asyncpg
from sqlalchemy import Engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.util.concurrency import await_

from app.db.urls import parse

#: ``application_name`` of each pool's connections, so ``pg_stat_activity`` (operators, tests)
#: tells the repositories' pool, the checkpointer's pool and the NOTIFY listener apart.
SQL_APPLICATION_NAME = "threadkeeper-sql"
CHECKPOINTER_APPLICATION_NAME = "threadkeeper-checkpointer"
LISTENER_APPLICATION_NAME = "threadkeeper-listener"
#: Connections older than this are replaced (server-side idle kills, failovers behind a proxy).
POOL_RECYCLE_SECONDS = 1800
#: Inside ``warm_checkouts()``, a connection back in the pool for less than this is lent without
#: a ping (see there).
WARM_SECONDS = 1.0
_WARM: ContextVar[bool] = ContextVar("threadkeeper_warm_checkouts", default=False)


@contextmanager
def warm_checkouts() -> Iterator[None]:
    """Within this context (a run's task and the tasks it starts), a pooled connection that was
    in use less than ``WARM_SECONDS`` ago is lent without a ping: a busy worker reuses its
    connections every few milliseconds, and a ping each time was a third of a turn's round
    trips. A connection idle for longer (an outage or a restart is behind most dead ones) is
    still pinged; one that died in between fails its statement with a connection error, which
    the run already rides out (it waits for the database and goes on from its last checkpoint).
    API requests are outside it: every one of their checkouts is pinged as before."""
    token = _WARM.set(True)
    try:
        yield
    finally:
        _WARM.reset(token)


def needs_ping(returned_at: float | None) -> bool:
    """Ping at checkout unless inside ``warm_checkouts()`` and back in the pool only briefly."""
    if not _WARM.get() or returned_at is None:
        return True
    return time.monotonic() - returned_at >= WARM_SECONDS


def create_engine(
    url: str,
    *,
    pool_size: int = 10,
    timeout_seconds: float = 10.0,
    transaction_pooler: bool = False,
) -> AsyncEngine:
    """At most ``pool_size`` connections, opened on demand and kept: no overflow, because under
    load overflow connections were opened and closed per request (connect, type introspection
    and statement preparation each time: a tenth of PostMessage's CPU); a request waits for a
    free one instead (at most ``timeout_seconds``, then 503). A connection killed while idle
    (``pg_terminate_backend``, a database restart) is noticed and replaced at checkout instead
    of failing the next request (see ``_ping_on_checkout``).

    Connections are opened from the parsed URL (app/db/urls.py: TLS, several hosts,
    ``target_session_attrs``, ``options``), never from SQLAlchemy's reading of its query.
    ``transaction_pooler``: behind PgBouncer in transaction mode (``pooler_safe_connect_args``)."""
    target = parse(url)
    kwargs = target.asyncpg_kwargs(application_name=SQL_APPLICATION_NAME, timeout=timeout_seconds)

    async def connect(*_: Any, **__: Any) -> Any:
        extra = {"statement_cache_size": 0} if transaction_pooler else {}
        return await asyncpg.connect(**kwargs, **extra)

    connect_args: dict[str, Any] = {"async_creator_fn": connect}
    if transaction_pooler:
        connect_args.update(POOLER_SAFE_SQLALCHEMY_ARGS)
    engine = create_async_engine(
        target.sqlalchemy_url(),
        pool_size=pool_size,
        max_overflow=0,
        pool_recycle=POOL_RECYCLE_SECONDS,
        pool_timeout=timeout_seconds,
        connect_args=connect_args,
    )
    if transaction_pooler:
        _BEHIND_POOLER.add(engine.sync_engine)
    _ping_on_checkout(engine)
    return engine


#: Behind a transaction pooler each transaction may run on another server connection, so a
#: statement must never outlive its transaction: SQLAlchemy's statement cache is off and it
#: prepares the *unnamed* statement (``""``: replaced by the next one, never closed, never
#: colliding with another client's ``__asyncpg_stmt_N__`` on a shared server connection), and
#: asyncpg's own cache is off (``statement_cache_size=0`` in ``create_engine``). Each prepare is
#: followed by its execute in the same transaction (SQLAlchemy begins one first), which pins the
#: server connection between the two; ``autocommit()`` therefore opens a transaction there.
POOLER_SAFE_SQLALCHEMY_ARGS: dict[str, Any] = {
    "prepared_statement_cache_size": 0,
    "prepared_statement_name_func": lambda: "",
}
#: The engines whose connections go through a transaction pooler.
_BEHIND_POOLER: weakref.WeakSet[Engine] = weakref.WeakSet()


def behind_transaction_pooler(engine: AsyncEngine) -> bool:
    return engine.sync_engine in _BEHIND_POOLER


def _ping_on_checkout(engine: AsyncEngine) -> None:
    """``pool_pre_ping`` in one round trip.

    SQLAlchemy's pre-ping on asyncpg costs three (BEGIN, ``;``, ROLLBACK), the largest single
    cost of PostMessage; one ``SELECT 1`` proves the connection alive just as well. It goes as a
    simple query (``execute`` without arguments: no prepared statement, so it is safe behind a
    transaction pooler too; asyncpg fails on an empty simple query, hence not ``;``). A dead one is replaced before the caller sees it.
    """

    @event.listens_for(engine.sync_engine, "checkout")
    def _checked_out(_: Any, record: Any, __: Any) -> None:
        conn = record.driver_connection
        if conn.is_closed():  # the driver already saw it end (no round trip)
            raise DisconnectionError("pooled connection is closed")
        if not needs_ping(record.info.get("returned_at")):
            return
        try:
            await_(conn.execute("SELECT 1"))
        except Exception as exc:
            raise DisconnectionError("pooled connection is dead") from exc

    @event.listens_for(engine.sync_engine, "checkin")
    def _checked_in(_: Any, record: Any) -> None:
        record.info["returned_at"] = time.monotonic()


def create_session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False)


@asynccontextmanager
async def autocommit(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A pooled connection in autocommit: each statement its own transaction, no BEGIN/COMMIT
    round trips and no ORM session. For the one-statement reads and writes of the hot paths
    (intake, search, a run's steps, claims and transitions); anything spanning statements
    takes a session and its transaction instead.

    Behind a transaction pooler the connection is in a transaction instead (committed at the
    end, rolled back on an error): there a statement outside a transaction could be prepared on
    one server connection and executed on another (see ``POOLER_SAFE_SQLALCHEMY_ARGS``)."""
    if behind_transaction_pooler(engine):
        async with engine.begin() as conn:
            yield conn
        return
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        yield conn
