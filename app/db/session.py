"""Engine and session factory. Services own the unit of work; repositories only use the session."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import (
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
        try:
            await_(record.driver_connection.fetchrow(";"))
        except Exception as exc:
            raise DisconnectionError("pooled connection is dead") from exc


def create_session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False)
