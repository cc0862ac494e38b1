"""The checkpointer's setup: no redundant thread_id indexes, and safe when processes start at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest
from alembic import command
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from app.db.checkpointer import MIGRATIONS, SETUP_LOCK_KEY, BoundedPostgresSaver
from app.db.migrate import alembic_config, upgrade_head
from app.db.urls import libpq_url
from tests.support.checkpoints import saver_on_pool
from tests.support.database import fresh_database

pytestmark = pytest.mark.integration

THREAD_ID_INDEXES = {
    "checkpoints_thread_id_idx",
    "checkpoint_blobs_thread_id_idx",
    "checkpoint_writes_thread_id_idx",
}


def _indexes(url: str) -> set[str]:
    with psycopg.connect(libpq_url(url)) as conn:
        rows = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename LIKE 'checkpoint%'"
        ).fetchall()
    return {r[0] for r in rows}


def _versions(url: str) -> list[int]:
    with psycopg.connect(libpq_url(url)) as conn:
        rows = conn.execute("SELECT v FROM checkpoint_migrations ORDER BY v").fetchall()
    return [r[0] for r in rows]


@asynccontextmanager
async def _saver(
    url: str, cls: type[AsyncPostgresSaver] = BoundedPostgresSaver
) -> AsyncIterator[Any]:
    async with saver_on_pool(url, cls, setup=False, max_size=2, acquire_timeout=30) as saver:
        yield saver


def test_only_the_thread_id_indexes_are_left_out() -> None:
    changed = [
        i
        for i, (ours, up) in enumerate(zip(MIGRATIONS, AsyncPostgresSaver.MIGRATIONS, strict=True))
        if ours != up
    ]
    assert len(MIGRATIONS) == len(AsyncPostgresSaver.MIGRATIONS)
    assert len(changed) == 3
    assert all("_thread_id_idx" in AsyncPostgresSaver.MIGRATIONS[i] for i in changed)


async def test_fresh_database_never_gets_the_indexes(database_url: str) -> None:
    # Production order: Alembic first (the checkpoint tables do not exist yet), then setup.
    with fresh_database(database_url) as url:
        await asyncio.to_thread(upgrade_head, url)
        async with _saver(url) as saver:
            await saver.setup()
            await saver.setup()  # a second start applies nothing
        assert _versions(url) == list(range(len(MIGRATIONS)))
        indexes = _indexes(url)
        assert {"checkpoints_pkey", "checkpoint_blobs_pkey", "checkpoint_writes_pkey"} <= indexes
        assert not indexes & THREAD_ID_INDEXES


async def test_migration_drops_the_indexes_an_older_setup_made_and_downgrade_restores(
    database_url: str,
) -> None:
    with fresh_database(database_url) as url:
        cfg = alembic_config(url)
        await asyncio.to_thread(command.upgrade, cfg, "0007_i23_recall")
        async with _saver(url, AsyncPostgresSaver) as upstream:
            await upstream.setup()  # what an earlier Threadkeeper ran
        assert _indexes(url) >= THREAD_ID_INDEXES
        await asyncio.to_thread(upgrade_head, url)
        assert not _indexes(url) & THREAD_ID_INDEXES
        async with _saver(url) as saver:
            await saver.setup()
        assert not _indexes(url) & THREAD_ID_INDEXES
        await asyncio.to_thread(command.downgrade, cfg, "0007_i23_recall")
        assert _indexes(url) >= THREAD_ID_INDEXES
        await asyncio.to_thread(upgrade_head, url)
        assert not _indexes(url) & THREAD_ID_INDEXES


async def test_two_processes_setting_up_at_once_wait_for_each_other(database_url: str) -> None:
    """Both setups queue on the advisory lock (seen in pg_locks), then both finish, and every
    migration is applied exactly once (without the lock one failed on a duplicate version)."""
    with fresh_database(database_url) as url:
        await asyncio.to_thread(upgrade_head, url)
        async with (
            await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True) as holder,
            _saver(url) as one,
            _saver(url) as two,
        ):
            await holder.execute("SELECT pg_advisory_lock(%s)", (SETUP_LOCK_KEY,))
            tasks = [asyncio.create_task(one.setup()), asyncio.create_task(two.setup())]
            for _ in range(200):
                cur = await holder.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                    " AND database = (SELECT oid FROM pg_database"
                    " WHERE datname = current_database())"
                )
                row = await cur.fetchone()
                if row is not None and row[0] == 2:
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("the two setups did not wait on the advisory lock")
            assert not any(t.done() for t in tasks)
            await holder.execute("SELECT pg_advisory_unlock(%s)", (SETUP_LOCK_KEY,))
            await asyncio.wait_for(asyncio.gather(*tasks), 60)
        assert _versions(url) == list(range(len(MIGRATIONS)))
        assert not _indexes(url) & THREAD_ID_INDEXES
