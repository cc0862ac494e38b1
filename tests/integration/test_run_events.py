"""run_events write amplification: coalesced token deltas, pruning after the retention period,
and idle pooled connections that the server killed (intake throughput work, issue 12)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from app.db.urls import libpq_url
from tests.support.api import add_doc, messages, new_thread
from tests.support.app_harness import AUTH, AppFactory, AppHarness

pytestmark = pytest.mark.integration


def event_rows(url: str, run_id: str) -> list[tuple[int, str]]:
    with psycopg.connect(libpq_url(url)) as conn:
        return [
            (int(r[0]), str(r[1]))
            for r in conn.execute(
                "SELECT id, type FROM run_events WHERE run_id = %s ORDER BY id", (run_id,)
            ).fetchall()
        ]


async def finished_turn(h: AppHarness, text: str, **wait: Any) -> tuple[str, dict[str, Any]]:
    tid = await new_thread(h)
    resp = await h.client.post(f"/v1/threads/{tid}/messages", json={"content": text}, headers=AUTH)
    assert resp.status_code == 202, resp.text
    run = await h.wait_for_run(tid, statuses={"completed", "failed", "interrupted"}, **wait)
    return tid, run


async def test_deltas_are_coalesced_by_size_and_resume_stays_exact(
    app_factory: AppFactory,
) -> None:
    """Word-sized tokens become one row per DELTA_FLUSH_CHARS (the timer never fires here), and
    Last-Event-ID from any event replays exactly the events after it."""
    async with app_factory(delta_flush_ms=600_000, delta_flush_chars=40) as h:
        await add_doc(h)
        tid, run = await finished_turn(h, "What happens when a lease expires?")
        assert run["status"] == "completed", run
        answer = (await messages(h, tid))[-1]["content"]
        assert len(answer) > 120, answer

        events = await h.sse_events(run["id"])
        deltas = [e["data"]["text"] for e in events if e["event"] == "delta"]
        assert "".join(deltas) == answer
        # Every delta but the step's last carries at least the bound; far fewer rows than words.
        assert all(len(d) >= 40 for d in deltas[:-1]), deltas
        assert 2 <= len(deltas) <= len(answer) // 40 + 1
        assert len(deltas) < len(answer.split()) // 3
        for i, e in enumerate(events[:-1]):
            assert await h.sse_events(run["id"], last_event_id=e["id"]) == events[i + 1 :]


async def test_events_of_finished_runs_are_pruned_after_retention(
    app_factory: AppFactory, clean_db: str
) -> None:
    """The worker deletes a finished run's events once the retention passed; an interrupted run
    (it can still resume) keeps them, and the runs themselves stay."""
    async with app_factory(run_events_retention_seconds=1.0, approval_tools="query_kb") as h:
        await add_doc(h)
        _, interrupted = await finished_turn(h, "lease?")
        assert interrupted["status"] == "interrupted", interrupted
        kept = event_rows(clean_db, interrupted["id"])
        assert kept
        cancel = await h.client.post(f"/v1/runs/{interrupted['id']}/cancel", headers=AUTH)
        assert cancel.status_code == 200, cancel.text
        assert event_rows(clean_db, interrupted["id"])[-1][1] == "status"

    async with app_factory(run_events_retention_seconds=3600.0) as h:
        _, done = await finished_turn(h, "What happens when a lease expires?")
        assert done["status"] == "completed", done
        # Within the retention: nothing is pruned, however often the worker looks.
        assert await h.container.worker.prune_run_events() == 0
        assert event_rows(clean_db, done["id"])

    async with app_factory(run_events_retention_seconds=1.0) as h:
        # The cancelled and the completed run finished over a second ago (or will shortly):
        # the worker's own housekeeping prunes both; nothing else (runs, messages) goes.
        deadline = asyncio.get_running_loop().time() + 60
        while event_rows(clean_db, interrupted["id"]) or event_rows(clean_db, done["id"]):
            assert asyncio.get_running_loop().time() < deadline, "events were never pruned"
            await asyncio.sleep(0.2)
        got = await h.client.get(f"/v1/runs/{done['id']}", headers=AUTH)
        assert got.status_code == 200 and got.json()["status"] == "completed"
        # A stream of a pruned run ends at once instead of hanging: nothing to send, 204.
        stream = await asyncio.wait_for(
            h.client.get(f"/v1/runs/{done['id']}/events", headers=AUTH), 30
        )
        assert stream.status_code == 204 and stream.content == b""


async def test_interrupted_runs_keep_their_events(app_factory: AppFactory, clean_db: str) -> None:
    async with app_factory(run_events_retention_seconds=1.0, approval_tools="query_kb") as h:
        await add_doc(h)
        _, run = await finished_turn(h, "lease?")
        assert run["status"] == "interrupted", run
        before = event_rows(clean_db, run["id"])
        with psycopg.connect(libpq_url(clean_db), autocommit=True) as conn:
            # Even an interrupted run that started long ago is not a finished one.
            conn.execute(
                "UPDATE agent_runs SET started_at = now() - interval '1 day' WHERE id = %s",
                (run["id"],),
            )
        assert await h.container.worker.prune_run_events() == 0
        assert event_rows(clean_db, run["id"]) == before


async def test_pooled_connections_killed_by_the_server_are_replaced(
    app_factory: AppFactory, clean_db: str
) -> None:
    """The one-round-trip checkout ping (instead of SQLAlchemy's three-round-trip pre-ping) still
    keeps a server-side kill of pooled connections from ever reaching a request."""
    async with app_factory(start_worker=False) as h:
        tid = await new_thread(h)
        # Several connections in the pool, all returned.
        got = await asyncio.gather(
            *(h.client.get(f"/v1/threads/{tid}", headers=AUTH) for _ in range(4))
        )
        assert {r.status_code for r in got} == {200}
        with psycopg.connect(libpq_url(clean_db), autocommit=True) as conn:
            killed = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend'"
            ).fetchone()
        assert killed and killed[0] >= 1
        for _ in range(6):
            resp = await h.client.get(f"/v1/threads/{tid}", headers=AUTH)
            assert resp.status_code == 200, resp.text
