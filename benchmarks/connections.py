"""How many PostgreSQL connections an API process and a worker process really hold, per pool,
under load: the measurements behind the pool-size defaults (docs/deploy.md#connection-budget).

Run: ``.venv/bin/python benchmarks/connections.py`` (``--threads``, ``--latency``, ``--seconds``;
``--env NAME=VALUE`` for both processes, e.g. ``--env THREADKEEPER_DB_POOL_SIZE=10``).

The deploy layout: one ``serve`` process with ``THREADKEEPER_WORKER_IN_PROCESS=false`` and one
``worker`` process, default settings, a fresh database of the server named by ``DATABASE_URL`` /
``TEST_DATABASE_URL``, the tests' OpenAI-protocol stub served apart at ``--latency`` seconds per
call (a turn is two calls). ``--threads`` threads post their next turn when the last finished
(closed loop) and read their agent state after each (the API's checkpointer reads). Every 0.2 s
``pg_stat_activity`` is read and each connection attributed to its process (its client port,
through psutil) and pool (its application name); printed: the most connections each process held
per pool and in all, the most server connections in all, and the turns completed.
``--pgbouncer``: both processes through a PgBouncer in transaction mode (40 server connections)
in front of the same database: PostgreSQL then sees the pooler's connections and the LISTEN ones.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.providers import Phase, provider, wait_provider
from benchmarks.service import (
    READY_SECONDS,
    Connection,
    app_server,
    create_threads,
    endpoint,
    server_pid,
    service_env,
    wait_http_ready,
    worker_process,
)
from benchmarks.turns_driver import completions, database

ACTIVITY = (
    "SELECT client_port, application_name FROM pg_stat_activity "
    "WHERE datname = current_database() AND application_name LIKE 'threadkeeper%'"
)


class Peaks:
    """The most connections per (process, pool) and per process, sampled."""

    def __init__(self, pids: dict[str, int], server_port: int) -> None:
        self.pids, self.server_port = pids, server_port
        self.per_pool: dict[tuple[str, str], int] = collections.defaultdict(int)
        self.per_process: dict[str, int] = collections.defaultdict(int)
        #: The most server connections in all (through a pooler: the pooler's).
        self.server = 0

    def _ports(self) -> dict[int, str]:
        ports: dict[int, str] = {}
        for role, pid in self.pids.items():
            for conn in psutil.Process(pid).net_connections(kind="tcp"):
                # Only connections to PostgreSQL itself (not to a pooler in between).
                if conn.laddr and conn.raddr and conn.raddr.port == self.server_port:
                    ports[conn.laddr.port] = role
        return ports

    async def run(self, url: str, stop: asyncio.Event) -> None:
        import psycopg

        from app.db.urls import libpq_url

        async with await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True) as db:
            while not stop.is_set():
                rows = await (await db.execute(ACTIVITY)).fetchall()
                ports = self._ports()
                counts: collections.Counter[tuple[str, str]] = collections.Counter(
                    (ports.get(port, "?"), name) for port, name in rows
                )
                self.server = max(self.server, len(rows))
                for key, n in counts.items():
                    self.per_pool[key] = max(self.per_pool[key], n)
                for role in self.pids:
                    held = sum(n for (r, _), n in counts.items() if r == role)
                    self.per_process[role] = max(self.per_process[role], held)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.2)


async def drive(base: str, url: str, threads: int, seconds: float) -> int:
    tids = await create_threads(base, threads)
    conns = [Connection(*endpoint(base)) for _ in tids]
    completed = 0
    stop_at = time.perf_counter() + seconds
    async with completions(url) as done:

        async def loop(i: int, tid: str) -> None:
            nonlocal completed
            n = 0
            while time.perf_counter() < stop_at:
                body = json.dumps({"content": f"thread {i} turn {n}: when does a lease expire?"})
                status, out = await conns[i].request(
                    "POST", f"/v1/threads/{tid}/messages", body.encode()
                )
                if status == 202:
                    finished, _ = await done.wait(str(json.loads(out)["request_id"]))
                    completed += finished == "completed"
                    await conns[i].request("GET", f"/v1/threads/{tid}/agent-state")
                n += 1

        await asyncio.gather(*(loop(i, t) for i, t in enumerate(tids)))
    for c in conns:
        c.close()
    return completed


@contextlib.asynccontextmanager
async def through(url: str, pgbouncer: bool) -> AsyncIterator[dict[str, str]]:
    """The processes' database settings: ``url`` itself, or a PgBouncer in front of it."""
    if not pgbouncer:
        yield {}
        return
    from tests.support.pgbouncer import pgbouncer as start_pgbouncer

    with start_pgbouncer(url, pool_size=40) as bouncer:
        yield {
            "DATABASE_URL": bouncer.url(),
            "THREADKEEPER_DATABASE_POOLER": "transaction",
            "THREADKEEPER_DATABASE_DIRECT_URL": url,
        }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=100)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for both")
    parser.add_argument(
        "--pgbouncer",
        action="store_true",
        help="both processes through a PgBouncer in transaction mode (tests/support/pgbouncer.py;"
        " LISTEN on the direct URL); the sampled connections are then the pooler's clients",
    )
    args = parser.parse_args()
    extra = dict(item.split("=", 1) for item in args.env)
    from benchmarks.common import server_from_env

    logs = Path(tempfile.mkdtemp(prefix="tk_connections_"))
    phase = Phase(args.threads, args.latency)
    with provider(phase, logs / "provider.log") as base_v1:
        await wait_provider(base_v1)
        async with database(server_from_env()) as url, through(url, args.pgbouncer) as route:
            workdir = tempfile.mkdtemp(prefix="tk_connections_wd_")
            env = {
                **service_env(url, workdir, worker=False),
                **route,
                "THREADKEEPER_LLM_BASE_URL": base_v1,
                "THREADKEEPER_LLM_API_KEY": "bench-provider-key",
                "THREADKEEPER_LLM_MODEL": "gpt-test",
                **extra,
            }
            try:
                with (
                    app_server("service", env, logs / "api.log") as base,
                    (logs / "worker.log").open("ab") as wlog,
                    worker_process(env, workdir, wlog) as worker,
                ):
                    await wait_http_ready(base, "/ready", time.monotonic() + READY_SECONDS)
                    peaks = Peaks(
                        {"api": server_pid(base), "worker": worker.pid},
                        make_url(url).port or 5432,
                    )
                    stop = asyncio.Event()
                    sampler = asyncio.create_task(peaks.run(url, stop))
                    completed = await drive(base, url, args.threads, args.seconds)
                    stop.set()
                    await sampler
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"{args.threads} threads @{args.latency:g}s, {args.seconds:g} s"
        f"{' through PgBouncer' if args.pgbouncer else ''}: {completed} turns, "
        f"PostgreSQL held at most {peaks.server} of their connections"
    )
    for role in ("api", "worker"):
        pools = ", ".join(
            f"{name.removeprefix('threadkeeper-')} {n}"
            for (r, name), n in sorted(peaks.per_pool.items())
            if r == role
        )
        print(f"{role:<7} most held at once: {peaks.per_process[role]} ({pools})")


if __name__ == "__main__":
    asyncio.run(main())
