"""Engine and session factory. Services own the unit of work; repositories only use the session."""

from __future__ import annotations

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


def create_engine(url: str, *, pool_size: int = 10, timeout_seconds: float = 10.0) -> AsyncEngine:
    """``pool_pre_ping``: a connection killed while idle (``pg_terminate_backend``, a database
    restart) is noticed and replaced at checkout instead of failing the next request."""
    return create_async_engine(
        sqlalchemy_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        pool_recycle=POOL_RECYCLE_SECONDS,
        pool_timeout=timeout_seconds,
        connect_args={
            "timeout": timeout_seconds,
            "server_settings": {"application_name": SQL_APPLICATION_NAME},
        },
    )


def create_session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False)
