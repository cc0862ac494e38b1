"""Run followers (SSE streams, WaitRun long-polls) under load: an idle follower costs the
database nothing while the listener works (polling is only its fallback), followers are capped
per principal and per process before a stream starts, and an open stream survives an exhausted
SQL pool instead of being cut (issue 22, item 3)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import event, text, update

from app.api.followers import Followers
from app.config import Settings
from app.container import Container, build_container
from app.db.models import AgentRun, RunStatus
from app.db.session import LISTENER_APPLICATION_NAME
from app.db.urls import libpq_url
from app.main import create_app
from app.repositories.run_events import RUN_EVENTS_CHANNEL
from tests.support.app_harness import AUTH, OTHER_AUTH, AppHarness, make_settings
from tests.support.live_server import serve_in_loop

pytestmark = pytest.mark.integration


@contextlib.asynccontextmanager
async def live_app(db: str, tmp_path: Path, **overrides: Any) -> AsyncIterator[AppHarness]:
    """The app on a real socket (httpx's ASGI transport would buffer a never-ending stream),
    worker off: the tests create runs with the worker's own claim."""
    settings = make_settings(db, tmp_path / "workdir", **overrides)

    async def container_factory(s: Settings) -> Container:
        return await build_container(s, start_worker=False)

    app = create_app(settings, container_factory=container_factory)
    async with (
        serve_in_loop(app) as base_url,
        httpx.AsyncClient(base_url=base_url, timeout=120) as client,
    ):
        h = AppHarness(app, client)
        await asyncio.wait_for(h.container.notifier.connected.wait(), 60)
        yield h


async def running_run(h: AppHarness, auth: dict[str, str] = AUTH) -> str:
    """A run in ``running`` (claimed, nobody executes it): its followers just wait."""
    thread = await h.client.post("/v1/threads", json={}, headers=auth)
    tid = thread.json()["id"]
    posted = await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "x"}, headers=auth)
    assert posted.status_code == 202, posted.text
    claimed = await h.container.worker.claim_next()
    assert claimed is not None
    return str(claimed.run_id)


class Stream:
    """One SSE follower on its own connection, parsed as it arrives."""

    def __init__(self, h: AppHarness, run_id: str, auth: dict[str, str] = AUTH) -> None:
        self.frames: list[dict[str, Any]] = []
        self.status: int | None = None
        self.ended_cleanly = False
        self.started = asyncio.Event()
        self.task = asyncio.create_task(self._follow(h, run_id, auth))

    async def _follow(self, h: AppHarness, run_id: str, auth: dict[str, str]) -> None:
        async with h.client.stream("GET", f"/v1/runs/{run_id}/events", headers=auth) as r:
            self.status = r.status_code
            self.started.set()
            async for line in r.aiter_lines():
                if line.startswith("data:"):
                    self.frames.append(json.loads(line[5:]))
            self.ended_cleanly = True  # the body ended without a transport error

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


class StatementCounter:
    """SQL statements the app's engine sends (every follower read is at least one)."""

    def __init__(self, h: AppHarness) -> None:
        self.count = 0
        self.engine = h.container.engine.sync_engine
        event.listen(self.engine, "before_cursor_execute", self._seen)

    def _seen(self, *_: Any) -> None:
        self.count += 1

    async def settle(self, rounds: int = 40) -> None:
        """Until no statement went out for a second (followers finished their first reads);
        a follower that polls never lets it settle, and the assertion after it fails."""
        for _ in range(rounds):
            before = self.count
            await asyncio.sleep(1.0)
            if self.count == before:
                return

    async def reach(self, target: int, what: str, timeout: float = 60) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while self.count < target:
            assert asyncio.get_running_loop().time() < deadline, f"{what}: {self.count}"
            await asyncio.sleep(0.1)

    def remove(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._seen)


async def finish(h: AppHarness, run_id: str) -> None:
    """End the run as its worker would (CancelRun only flags a run a worker holds)."""
    async with h.container.sessions() as session, session.begin():
        await session.execute(
            update(AgentRun)
            .where(AgentRun.id == uuid.UUID(run_id))
            .values(status=RunStatus.CANCELLED, lease_holder=None)
        )
        await session.execute(
            text(
                "INSERT INTO run_events (run_id, type, data) VALUES (:r, 'status', "
                '\'{"status": "cancelled", "final": true}\'::jsonb)'
            ),
            {"r": uuid.UUID(run_id)},
        )
        await session.execute(
            text("SELECT pg_notify(:c, :r)"), {"c": RUN_EVENTS_CHANNEL, "r": run_id}
        )


async def until(predicate: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def kill_listener(db: str) -> int:
    with psycopg.connect(libpq_url(db), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s AND datname = current_database()",
            (LISTENER_APPLICATION_NAME,),
        ).fetchone()
    return int(row[0]) if row else 0


async def test_idle_followers_read_nothing_while_the_listener_works(
    clean_db: str, tmp_path: Path
) -> None:
    async with live_app(clean_db, tmp_path) as h:
        run_id = await running_run(h)
        streams = [Stream(h, run_id) for _ in range(8)]
        waits = [
            asyncio.create_task(h.client.get(f"/v1/runs/{run_id}/wait", headers=AUTH))
            for _ in range(4)
        ]
        followers: Followers = h.app.state.followers
        await until(lambda: followers.open_count() == 12, "12 followers")
        await until(lambda: all(s.frames for s in streams), "every stream's first event")
        counter = StatementCounter(h)
        try:
            await counter.settle()
            counter.count = 0
            await asyncio.sleep(3)  # 12 followers sit idle: the old code read 12 times/s
            assert counter.count == 0, f"{counter.count} statements from idle followers"

            # The listener goes down and cannot come back (its address refuses): followers
            # fall back to polling, and every stream stays open.
            notifier = h.container.notifier
            good = notifier.conninfo
            notifier.conninfo = "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2"
            assert kill_listener(clean_db) == 1
            await until(lambda: not notifier.connected.is_set(), "the listener to go down")
            counter.count = 0
            await counter.reach(3 * len(streams), "reads while the listener is down")
            assert not any(s.task.done() for s in streams)

            # Back: one catch-up read each, then silence again.
            notifier.conninfo = good
            await asyncio.wait_for(notifier.connected.wait(), 60)
            await counter.settle()
            counter.count = 0
            await asyncio.sleep(2)
            assert counter.count == 0, f"{counter.count} statements after the listener came back"
        finally:
            counter.remove()

        # The first long-polls ended at their 30 s timeout (the run still running); fresh ones
        # and every stream are woken by the run's end.
        for answer in await asyncio.gather(*waits):
            assert answer.status_code == 200 and answer.json()["status"] == "running"
        waits = [
            asyncio.create_task(h.client.get(f"/v1/runs/{run_id}/wait", headers=AUTH))
            for _ in range(4)
        ]
        await until(lambda: followers.open_count() == 12, "12 followers again")
        await finish(h, run_id)
        for answer in await asyncio.gather(*waits):
            assert answer.status_code == 200 and answer.json()["status"] == "cancelled"
        await asyncio.wait_for(asyncio.gather(*(s.task for s in streams)), 60)
        for s in streams:
            assert s.ended_cleanly and s.frames[-1]["final"] is True, s.frames
        assert followers.open_count() == 0


async def test_followers_are_capped_per_principal_and_per_process_before_they_start(
    clean_db: str, tmp_path: Path
) -> None:
    async with live_app(clean_db, tmp_path, max_streams_per_principal=2, max_streams=3) as h:
        alice_run = await running_run(h)
        bob_run = await running_run(h, OTHER_AUTH)
        alice = [Stream(h, alice_run), Stream(h, alice_run)]
        for s in alice:
            await asyncio.wait_for(s.started.wait(), 60)
            assert s.status == 200

        # Alice's third follower, stream or long-poll: 429 with its code and Retry-After.
        third = await h.client.get(f"/v1/runs/{alice_run}/events", headers=AUTH)
        wait = await h.client.get(f"/v1/runs/{alice_run}/wait?timeout=1", headers=AUTH)
        for refused in (third, wait):
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"] == "too_many_streams"
            assert int(refused.headers["retry-after"]) >= 1

        # Bob is not affected by Alice's cap...
        bob = Stream(h, bob_run, OTHER_AUTH)
        await asyncio.wait_for(bob.started.wait(), 60)
        assert bob.status == 200
        # ...but the process is now full (3): refused before the stream starts, 503.
        full = await h.client.get(f"/v1/runs/{bob_run}/events", headers=OTHER_AUTH)
        assert full.status_code == 503, full.text
        assert full.json()["error"] == "streams_unavailable"
        assert int(full.headers["retry-after"]) >= 1

        # The open streams were never touched: the run's end reaches them, and the places
        # they held are free again.
        await finish(h, alice_run)
        await asyncio.wait_for(asyncio.gather(*(s.task for s in alice)), 60)
        assert all(s.ended_cleanly and s.frames[-1]["final"] for s in alice)
        again = await h.client.get(f"/v1/runs/{alice_run}/events", headers=AUTH)
        assert again.status_code == 200 and '"final":true' in again.text
        await bob.close()
        await until(lambda: h.app.state.followers.open_count() == 0, "bob's place back")


async def test_an_open_stream_survives_an_exhausted_pool_and_new_ones_are_refused_at_start(
    clean_db: str, tmp_path: Path
) -> None:
    async with live_app(clean_db, tmp_path, db_pool_size=2, db_pool_timeout_seconds=0.5) as h:
        run_id = await running_run(h)
        stream = Stream(h, run_id)
        await until(lambda: bool(stream.frames), "the stream's first event")
        engine = h.container.engine
        held = [await engine.connect() for _ in range(2)]  # every pooled connection
        try:
            # An event arrives: the stream is woken, its read finds no connection in time.
            with psycopg.connect(libpq_url(clean_db), autocommit=True) as conn:
                conn.execute(
                    "INSERT INTO run_events (run_id, type, data) VALUES (%s, 'delta', %s)",
                    (run_id, json.dumps({"lc_id": "probe", "text": "probe"})),
                )
                conn.execute("SELECT pg_notify(%s, %s)", (RUN_EVENTS_CHANNEL, run_id))
            # A new stream is refused before it starts, never half-open.
            refused = await h.client.get(f"/v1/runs/{run_id}/events", headers=AUTH)
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"] == "database_unavailable"
            assert not stream.task.done()  # the open stream was not cut
        finally:
            for conn in held:
                await conn.close()
        await until(lambda: stream.frames[-1].get("lc_id") == "probe", "the probe event")
        await finish(h, run_id)
        await asyncio.wait_for(stream.task, 60)
        assert stream.ended_cleanly and stream.frames[-1]["final"] is True
