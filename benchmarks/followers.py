"""Idle run followers beside intake load: what N idle SSE streams and M WaitRun long-polls
cost the database, and what they do to GetThread (issue 22, item 3). Not a test: figures.

Run: ``.venv/bin/python benchmarks/followers.py --streams 200 --polls 50`` (about 2 minutes).

The service runs as ``scripts/serve.sh`` does (one process, in-process worker, production
settings), on a fresh database; every turn needs an approval (``query_kb``), so runs stop
``interrupted``. The streams follow one interrupted run (they stay open and idle); the
long-polls re-issue WaitRun on a run that stays ``running`` (its lease held by nobody alive).

Phases, each measured by ``pg_stat_database`` (``xact_commit + xact_rollback`` of the bench
database; backends report with a delay of up to a few seconds, so windows are long):

1. idle, no followers: the service's own background transactions (worker housekeeping);
2. idle, N streams + M long-polls open: transactions/s per idle follower over phase 1;
3. intake load (``--posters`` clients posting back to back) plus ``--readers`` clients calling
   GetThread in a loop, with the followers still open: GetThread p50/p99, refused or cut
   streams;
4. the same load with the followers closed, for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (
    fresh_database,
    percentile,
    run_stoppable,
    server_from_env,
    wait_ready,
)
from benchmarks.service import API_KEY, READY_SECONDS, app_server, service_env

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def transactions(db: str) -> int:
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


async def tx_per_second(db: str, seconds: float) -> float:
    before = await asyncio.to_thread(transactions, db)
    await asyncio.sleep(seconds)
    return (await asyncio.to_thread(transactions, db) - before) / seconds


async def new_thread(client: httpx.AsyncClient) -> str:
    resp = await client.post("/v1/threads", json={}, headers=AUTH)
    resp.raise_for_status()
    return str(resp.json()["id"])


async def interrupted_run(client: httpx.AsyncClient) -> str:
    tid = await new_thread(client)
    (await client.post(f"/v1/threads/{tid}/messages", json={"content": "q"}, headers=AUTH))
    for _ in range(1200):
        items = (await client.get(f"/v1/threads/{tid}/runs", headers=AUTH)).json()["items"]
        if items and items[0]["status"] == "interrupted":
            return str(items[0]["id"])
        await asyncio.sleep(0.1)
    raise SystemExit("no interrupted run (is query_kb gated?)")


def hold_running(db: str, run_id: str) -> None:
    """The run stays ``running``: leased for an hour to a holder that does not exist."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "UPDATE agent_runs SET status = 'running', lease_holder = 'bench-ghost', "
            "lease_expires_at = now() + interval '1 hour', interrupt = NULL WHERE id = %s",
            (run_id,),
        )


class Followers:
    def __init__(self) -> None:
        self.opened = 0
        self.refused: dict[int, int] = {}
        #: Transport errors by kind (a stream cut mid-response, a long-poll's connection lost).
        self.cut: dict[str, int] = {}
        self.ended = 0
        self.tasks: list[asyncio.Task[None]] = []

    async def stream(self, client: httpx.AsyncClient, run_id: str) -> None:
        try:
            async with client.stream("GET", f"/v1/runs/{run_id}/events", headers=AUTH) as r:
                if r.status_code != 200:
                    self.refused[r.status_code] = self.refused.get(r.status_code, 0) + 1
                    return
                self.opened += 1
                async for _ in r.aiter_lines():
                    pass
                self.ended += 1
        except httpx.TransportError as exc:
            self._cut("stream", exc)

    def _cut(self, what: str, exc: Exception) -> None:
        key = f"{what}:{type(exc).__name__}"
        self.cut[key] = self.cut.get(key, 0) + 1

    async def poll(self, client: httpx.AsyncClient, run_id: str) -> None:
        while True:
            try:
                r = await client.get(f"/v1/runs/{run_id}/wait", headers=AUTH)
            except httpx.TransportError as exc:
                self._cut("poll", exc)
                await asyncio.sleep(1)
                continue
            if r.status_code != 200:
                self.refused[r.status_code] = self.refused.get(r.status_code, 0) + 1
                await asyncio.sleep(1)

    async def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        for t in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t


async def load(
    client: httpx.AsyncClient, threads: list[str], readers: int, seconds: float
) -> dict[str, Any]:
    """Posters post back to back; readers call GetThread back to back; GetThread latencies."""
    stop = time.monotonic() + seconds
    latencies: list[float] = []
    posted: list[int] = []

    async def poster(tid: str) -> None:
        n = 0
        while time.monotonic() < stop:
            r = await client.post(
                f"/v1/threads/{tid}/messages", json={"content": "more"}, headers=AUTH
            )
            n += r.status_code == 202
        posted.append(n)

    async def reader(tid: str) -> None:
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            r = await client.get(f"/v1/threads/{tid}", headers=AUTH)
            if r.status_code == 200:
                latencies.append(time.perf_counter() - t0)

    await asyncio.gather(
        *(poster(t) for t in threads), *(reader(threads[i % len(threads)]) for i in range(readers))
    )
    return {
        "posts_per_s": sum(posted) / seconds,
        "get_thread_n": len(latencies),
        "get_thread_p50_ms": 1000 * percentile(latencies, 0.5) if latencies else float("nan"),
        "get_thread_p99_ms": 1000 * percentile(latencies, 0.99) if latencies else float("nan"),
    }


async def run(args: argparse.Namespace, db: str, workdir: str) -> None:
    env = {
        **service_env(db, workdir, worker=True),
        "THREADKEEPER_APPROVAL_TOOLS": "query_kb",
        # One principal holds every follower here; its cap is not what is measured.
        "THREADKEEPER_MAX_STREAMS_PER_PRINCIPAL": "0",
    }
    log_path = Path(workdir) / "service.log"
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    with app_server("service", env, log_path) as base:
        async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as client:
            await wait_ready(client, time.monotonic() + READY_SECONDS)
            followed = await interrupted_run(client)
            ghost = await interrupted_run(client)
            hold_running(db, ghost)
            threads = [await new_thread(client) for _ in range(args.posters)]

            idle_base = await tx_per_second(db, args.idle_seconds)
            followers = Followers()
            followers.tasks = [
                asyncio.create_task(followers.stream(client, followed)) for _ in range(args.streams)
            ] + [asyncio.create_task(followers.poll(client, ghost)) for _ in range(args.polls)]
            for _ in range(600):
                if followers.opened + sum(followers.refused.values()) >= args.streams:
                    break
                await asyncio.sleep(0.1)
            # The followers' first reads are over, and reported: an idle backend flushes its
            # statistics within 10 s (PGSTAT_IDLE_INTERVAL).
            await asyncio.sleep(11)
            idle_followed = await tx_per_second(db, args.idle_seconds)
            n = args.streams + args.polls
            with_followers = await load(client, threads, args.readers, args.seconds)
            still_open = sum(not t.done() for t in followers.tasks)
            await followers.close()
            without = await load(client, threads, args.readers, args.seconds)

    print(f"followers: {args.streams} idle streams + {args.polls} long-polls, one principal")
    print(
        f"  opened {followers.opened}, refused {followers.refused or 0}, cut {followers.cut or 0}, "
        f"still open after the load {still_open}/{n}"
    )
    print(f"idle transactions/s: {idle_base:.1f} without followers, {idle_followed:.1f} with")
    print(f"  per idle follower: {(idle_followed - idle_base) / n:.3f} tx/s (target ~0)")
    for name, got in (("with followers", with_followers), ("without followers", without)):
        print(
            f"load {name}: {got['posts_per_s']:.0f} posts/s, GetThread n={got['get_thread_n']} "
            f"p50 {got['get_thread_p50_ms']:.1f} ms p99 {got['get_thread_p99_ms']:.1f} ms"
        )
    print(f"service log: {log_path}" if args.keep else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--polls", type=int, default=50)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=15.0, help="per load phase")
    parser.add_argument("--posters", type=int, default=8)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--keep", action="store_true", help="keep the service log")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="tk-followers-")
    try:
        with fresh_database(server_from_env(), "tk_followers") as db:
            asyncio.run(run(args, db, workdir))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_stoppable(main))
