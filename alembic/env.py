"""Alembic environment: async engine, URL from the environment, checkpointer tables left alone."""

from __future__ import annotations

import asyncio
from typing import Any

from alembic import context
from sqlalchemy.engine import Connection

from app.db.models import Base
from app.db.session import create_engine
from app.db.urls import sqlalchemy_url

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    """The URL handed in by ``app.db.migrate``, else alembic.ini's, else the environment's (the
    plain ``alembic`` CLI: ``DATABASE_URL`` or ``THREADKEEPER_DATABASE_URL``, read by the same
    settings loader the service uses)."""
    url = config.attributes.get("database_url") or config.get_main_option("sqlalchemy.url")
    if not url:
        from app.config import load_settings

        db = load_settings().database
        url = db.session_url or db.database_url
        config.attributes.setdefault(
            "transaction_pooler", db.transaction_pooler and not db.session_url
        )
    if not url:
        raise SystemExit("alembic: set DATABASE_URL (or THREADKEEPER_DATABASE_URL) to migrate")
    return str(url)


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """LangGraph's checkpointer owns the checkpoint* tables; autogenerate must not drop them."""
    return not (type_ == "table" and name is not None and name.startswith("checkpoint"))


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        include_name=include_name,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    # The service's own engine factory: the URL's TLS and libpq parameters, and pooler-safe
    # statements when THREADKEEPER_DATABASE_POOLER=transaction and no direct URL was given.
    engine = create_engine(
        _url(), pool_size=1, transaction_pooler=bool(config.attributes.get("transaction_pooler"))
    )
    async with engine.connect() as conn:
        await conn.run_sync(_run)
    await engine.dispose()


def run_migrations_offline() -> None:
    context.configure(
        url=sqlalchemy_url(_url()), target_metadata=target_metadata, literal_binds=True
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
    else:
        asyncio.run(_run_async())
