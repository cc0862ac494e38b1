"""A crash at a statement boundary, made real: the statement's backend is killed while it waits
on a lock this helper holds (``run_events`` locked in SHARE mode, so its insert waits)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import psycopg
import pytest

from app.db.urls import libpq_url


def _waiting(url: str, marker: str) -> int | None:
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE %s",
            (f"%{marker}%",),
        ).fetchone()
    return int(row[0]) if row else None


async def kill_while_waiting(url: str, marker: str, statement: Awaitable[Any]) -> None:
    """Run ``statement`` while ``run_events`` is locked, kill its backend once it waits on the
    lock, and require that it failed."""
    blocker = await asyncio.to_thread(psycopg.connect, libpq_url(url))
    try:
        blocker.execute("LOCK TABLE run_events IN SHARE MODE")
        task = asyncio.ensure_future(statement)
        pid = None
        async with asyncio.timeout(60):
            while pid is None:
                pid = await asyncio.to_thread(_waiting, url, marker)
                await asyncio.sleep(0.05)
        with psycopg.connect(libpq_url(url), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(Exception):  # noqa: B017 - the driver's connection error
            await task
    finally:
        blocker.rollback()
        blocker.close()
