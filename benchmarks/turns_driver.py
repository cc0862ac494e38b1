"""Driving turns against the service for ``benchmarks/turns.py``: the service in a layout
(``single`` or ``deploy``) with the pid of its worker process, a fresh database per phase, the
poller that tells when runs finished, one turn start to finish, and the capacity phase (a closed
loop of turns per thread, also run against LangGraph's own server)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import fresh_database, percentile
from benchmarks.service import (
    READY_SECONDS,
    Connection,
    app_server,
    create_threads,
    endpoint,
    process_cpu_seconds,
    server_pid,
    service_env,
    wait_http_ready,
    worker_process,
)


# --- the service ---------------------------------------------------------------------------------
@contextlib.contextmanager
def service(
    layout: str, database_url: str, worker_url: str, workdir: str, log_path: Path
) -> Iterator[tuple[str, int]]:
    """The API's base URL and the pid of the process that runs the worker. ``worker_url`` is
    the database URL the worker process uses (deploy: maybe through the counting proxy)."""
    env = service_env(database_url, workdir, worker=layout == "single")
    with log_path.open("ab") as log_file, app_server("service", env, log_path) as base:
        if layout == "single":
            yield base, -1
            return
        with worker_process({**env, "DATABASE_URL": worker_url}, workdir, log_file) as worker:
            yield base, worker.pid


@contextlib.asynccontextmanager
async def database(server: str) -> Any:
    """``fresh_database`` off the loop (Alembic runs its own event loop)."""
    stack = contextlib.ExitStack()
    url = await asyncio.to_thread(stack.enter_context, fresh_database(server, "tk_turns"))
    try:
        yield url
    finally:
        await asyncio.to_thread(stack.close)


class Completions:
    """Tells when runs finished: one poll query for every pending request (every 5 ms)."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.pending: dict[str, asyncio.Future[tuple[str, float]]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        import psycopg

        from app.db.urls import libpq_url

        async with await psycopg.AsyncConnection.connect(
            libpq_url(self.database_url), autocommit=True
        ) as db:
            while not stop.is_set():
                if self.pending:
                    rows = await (
                        await db.execute(
                            "SELECT r.request_id::text, r.status::text, "
                            "extract(epoch FROM r.finished_at - q.created_at)::float8 "
                            "FROM agent_runs r JOIN agent_run_requests q ON q.id = r.request_id "
                            "WHERE r.request_id = ANY(%s::uuid[]) AND r.finished_at IS NOT NULL",
                            (list(self.pending),),
                        )
                    ).fetchall()
                    for request_id, status, seconds in rows:
                        future = self.pending.pop(request_id, None)
                        if future is not None and not future.done():
                            future.set_result((status, seconds))
                await asyncio.sleep(0.005)

    def wait(self, request_id: str) -> asyncio.Future[tuple[str, float]]:
        future: asyncio.Future[tuple[str, float]] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        return future


async def post(conn: Connection, thread_id: str, n: int) -> str:
    body = json.dumps({"content": f"turn {n}: when does lease {n} expire?"}).encode()
    status, out = await conn.request("POST", f"/v1/threads/{thread_id}/messages", body)
    assert status == 202, out
    return str(json.loads(out)["request_id"])


async def turn(conn: Connection, done: Completions, thread_id: str, n: int) -> float:
    """One turn, start to finish; its accepted->completed seconds (database clock)."""
    request_id = await post(conn, thread_id, n)
    status, seconds = await asyncio.wait_for(done.wait(request_id), 600)
    if status != "completed":
        raise SystemExit(f"turn {n} of {thread_id} ended {status}")
    return seconds


@contextlib.asynccontextmanager
async def completions(database_url: str) -> Any:
    done = Completions(database_url)
    stop = asyncio.Event()
    task = asyncio.create_task(done.run(stop))
    try:
        yield done
    finally:
        stop.set()
        await task


# --- 1. capacity ---------------------------------------------------------------------------------
@dataclass
class Capacity:
    turns_per_second: float
    p50_ms: float
    p99_ms: float
    cpu_ms_per_turn: float


async def closed_loop(
    threads: list[str],
    seconds: float,
    one_turn: Callable[[int, str, int], Awaitable[float]],
    cpu: Callable[[], float],
) -> Capacity:
    """Each thread: a turn, then the next, for ``seconds`` (after one warm-up turn each)."""
    await asyncio.gather(*(one_turn(i, t, 0) for i, t in enumerate(threads)))
    latencies: list[float] = []
    cpu0, t0 = cpu(), time.perf_counter()
    stop_at = t0 + seconds

    async def loop(i: int, thread_id: str) -> None:
        n = 1
        while time.perf_counter() < stop_at:
            latencies.append(await one_turn(i, thread_id, n))
            n += 1

    await asyncio.gather(*(loop(i, t) for i, t in enumerate(threads)))
    elapsed = time.perf_counter() - t0
    used = cpu() - cpu0
    return Capacity(
        len(latencies) / elapsed,
        percentile(latencies, 0.5) * 1000,
        percentile(latencies, 0.99) * 1000,
        used / len(latencies) * 1000,
    )


async def capacity(
    layout: str, server: str, thread_counts: list[int], seconds: float, logs: Path
) -> dict[int, Capacity]:
    out: dict[int, Capacity] = {}
    for count in thread_counts:
        async with database(server) as url:
            workdir = tempfile.mkdtemp(prefix="tk_turns_")
            with service(layout, url, url, workdir, logs) as (base, worker_pid):
                await wait_http_ready(base, "/ready", time.monotonic() + READY_SECONDS)
                pid = worker_pid if worker_pid > 0 else server_pid(base)
                threads = await create_threads(base, count)
                conns = [Connection(*endpoint(base)) for _ in threads]
                async with completions(url) as done:

                    async def one(
                        i: int, thread_id: str, n: int, conns: list[Connection] = conns
                    ) -> float:
                        return await turn(conns[i], done, thread_id, n)

                    out[count] = await closed_loop(
                        threads, seconds, one, lambda pid=pid: process_cpu_seconds(pid)
                    )
                for c in conns:
                    c.close()
            shutil.rmtree(workdir, ignore_errors=True)
    return out
