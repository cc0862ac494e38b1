"""A worker in another process starts a turn on NOTIFY, not on its next poll (issue 12).

The worker process polls every 120 s here, so a turn that starts within the test's wait (60 s)
was started by the notification. Intake through both paths is covered (the one-statement hot
path and the Idempotency-Key transaction), and a message queued behind another one still runs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest

from app.db.urls import libpq_url
from app.repositories.runs import WORK_CHANNEL
from tests.support.api import new_thread
from tests.support.app_harness import API_KEY, AUTH, AppFactory
from tests.support.processes import app_process, reaped
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def listening(db: str) -> bool:
    """True once some session has run ``LISTEN`` on the work channel (the worker's listener)."""
    async with await psycopg.AsyncConnection.connect(libpq_url(db), autocommit=True) as conn:
        row = await (
            await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND query = %s",
                (f"LISTEN {WORK_CHANNEL}",),
            )
        ).fetchone()
    return bool(row and row[0])


async def test_standalone_worker_is_woken_by_intake_notifications(
    app_factory: AppFactory, clean_db: str, tmp_path: Path
) -> None:
    env = {
        "DATABASE_URL": clean_db,
        "THREADKEEPER_LLM_BASE_URL": "",  # the offline extractive model
        "THREADKEEPER_WORKER_POLL_SECONDS": "120",
        "THREADKEEPER_WORKDIR_ROOT": str(tmp_path / "wd"),
        "THREADKEEPER_API_KEYS": f"alice:{API_KEY}",
        "THREADKEEPER_WORKER_HEARTBEAT_FILE": str(tmp_path / "w.heartbeat"),
    }
    async with app_factory(start_worker=False) as h:
        worker = app_process(["worker"], env, tmp_path / "worker.log")
        with reaped(worker):
            await wait_until(lambda: listening(clean_db), "the worker's LISTEN", timeout=120)
            # Past the worker's first claim round: from now on only a wake-up starts a turn.
            await asyncio.sleep(1.0)

            first = await new_thread(h)
            resp = await h.client.post(
                f"/v1/threads/{first}/messages", json={"content": "what is a lease?"}, headers=AUTH
            )
            assert resp.status_code == 202, resp.text
            # A second message queues behind the first (no notification needed: the worker that
            # finishes the first turn claims it).
            resp = await h.client.post(
                f"/v1/threads/{first}/messages", json={"content": "and a heartbeat?"}, headers=AUTH
            )
            assert resp.status_code == 202, resp.text
            second = await new_thread(h)
            resp = await h.client.post(
                f"/v1/threads/{second}/messages",
                json={"content": "keyed"},
                headers={**AUTH, "Idempotency-Key": "wake-1"},
            )
            assert resp.status_code == 202, resp.text

            async def finished(tid: str, count: int) -> bool:
                runs = (await h.client.get(f"/v1/threads/{tid}/runs", headers=AUTH)).json()
                done = [r for r in runs["items"] if r["status"] == "completed"]
                return len(done) == count

            await wait_until(lambda: finished(first, 2), "both turns on the first thread", 60)
            await wait_until(lambda: finished(second, 1), "the keyed turn", 60)
