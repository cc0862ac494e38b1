"""Engine and session factory. Services own the unit of work; repositories only use the session."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import Any

from sqlalchemy import event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.util.concurrency import await_

from app.db.urls import sqlalchemy_url

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


def create_engine(url: str, *, pool_size: int = 10, timeout_seconds: float = 10.0) -> AsyncEngine:
    """At most ``pool_size`` connections, opened on demand and kept: no overflow, because under
    load overflow connections were opened and closed per request (connect, type introspection
    and statement preparation each time: a tenth of PostMessage's CPU); a request waits for a
    free one instead (at most ``timeout_seconds``, then 503). A connection killed while idle
    (``pg_terminate_backend``, a database restart) is noticed and replaced at checkout instead
    of failing the next request (see ``_ping_on_checkout``)."""
    engine = create_async_engine(
        sqlalchemy_url(url),
        pool_size=pool_size,
        max_overflow=0,
        pool_recycle=POOL_RECYCLE_SECONDS,
        pool_timeout=timeout_seconds,
        connect_args={
            "timeout": timeout_seconds,
            "server_settings": {"application_name": SQL_APPLICATION_NAME},
        },
    )
    _ping_on_checkout(engine)
    return engine


def _ping_on_checkout(engine: AsyncEngine) -> None:
    """``pool_pre_ping`` in one round trip.

    SQLAlchemy's pre-ping on asyncpg costs three (BEGIN, ``;``, ROLLBACK), the largest single
    cost of PostMessage; a bare ``;`` proves the connection alive just as well (no pgbouncer in
    transaction mode here). A dead one is replaced before the caller sees it.
    """

    @event.listens_for(engine.sync_engine, "checkout")
    def _checked_out(_: Any, record: Any, __: Any) -> None:
        conn = record.driver_connection
        if conn.is_closed():  # the driver already saw it end (no round trip)
            raise DisconnectionError("pooled connection is closed")
        if not needs_ping(record.info.get("returned_at")):
            return
        try:
            await_(conn.fetchrow(";"))
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
    takes a session and its transaction instead."""
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        yield conn
