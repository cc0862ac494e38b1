"""Engine and session factory. Services own the unit of work; repositories only use the session."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from app.db.urls import sqlalchemy_url

#: ``application_name`` of each pool's connections, so ``pg_stat_activity`` (operators, tests)
#: tells the repositories' pool, the checkpointer's pool and the NOTIFY listener apart.
SQL_APPLICATION_NAME = "threadkeeper-sql"
CHECKPOINTER_APPLICATION_NAME = "threadkeeper-checkpointer"
LISTENER_APPLICATION_NAME = "threadkeeper-listener"
#: Connections older than this are replaced (server-side idle kills, failovers behind a proxy).
POOL_RECYCLE_SECONDS = 1800
#: A pooled connection idle longer than this is pinged before use; a busier one is not.
PING_IDLE_SECONDS = 1.0


def create_engine(url: str, *, pool_size: int = 10, timeout_seconds: float = 10.0) -> AsyncEngine:
    """A fixed pool: callers wait (up to ``timeout_seconds``) for a connection rather than open a
    throwaway one (under load, overflow connections were opened and closed per request: connect,
    type introspection and statement preparation every time). A connection killed while idle
    (``pg_terminate_backend``, a database restart) is noticed and replaced at checkout instead of
    failing the next request (see ``_ping_idle_connections``)."""
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
    _ping_idle_connections(engine)
    return engine


def _ping_idle_connections(engine: AsyncEngine) -> None:
    """``pool_pre_ping`` for connections that sat idle only.

    SQLAlchemy's pre-ping costs three round trips (BEGIN, ``;``, ROLLBACK on asyncpg) on every
    checkout, the largest single cost of PostMessage. A connection returned moments ago is as
    alive as a ping would show; one that sat idle (a database restart, an idle timeout) is
    pinged, and a dead one is replaced before the caller sees it.
    """

    @event.listens_for(engine.sync_engine, "connect")
    @event.listens_for(engine.sync_engine, "checkin")
    def _fresh(_: Any, record: Any) -> None:
        record.info["returned_at"] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _: Any) -> None:
        returned = record.info.get("returned_at")
        if returned is not None and time.monotonic() - returned < PING_IDLE_SECONDS:
            return
        try:
            dbapi_connection.ping()
        except Exception as exc:
            raise DisconnectionError("pooled connection is dead") from exc


def create_session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False)
