"""Run Alembic migrations from code (``--migrate`` / THREADKEEPER_MIGRATE_ON_START)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def alembic_config(database_url: str, *, transaction_pooler: bool = False) -> Config:
    cfg = Config(str(PROJECT_ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(PROJECT_ROOT / "alembic"))
    cfg.attributes["database_url"] = database_url
    cfg.attributes["transaction_pooler"] = transaction_pooler
    return cfg


def upgrade_head(database_url: str, *, transaction_pooler: bool = False) -> None:
    """Blocking (Alembic's env runs its own event loop): call it from a thread inside async code.
    ``transaction_pooler``: ``database_url`` goes through one (no direct URL was given); the
    migrations then run in one transaction on pooler-safe connections."""
    command.upgrade(alembic_config(database_url, transaction_pooler=transaction_pooler), "head")


def downgrade_base(database_url: str) -> None:
    command.downgrade(alembic_config(database_url), "base")


@lru_cache(maxsize=1)
def head_revisions() -> frozenset[str]:
    """The revisions ``alembic upgrade head`` leads to (read from the shipped scripts)."""
    return frozenset(ScriptDirectory.from_config(alembic_config("")).get_heads())


async def applied_revisions(engine: AsyncEngine) -> frozenset[str]:
    """The revisions the database is at (empty before the first migration)."""
    async with engine.connect() as conn:
        exists = await conn.scalar(text("SELECT to_regclass('alembic_version') IS NOT NULL"))
        if not exists:
            return frozenset()
        rows = await conn.execute(text("SELECT version_num FROM alembic_version"))
        return frozenset(str(r[0]) for r in rows)
