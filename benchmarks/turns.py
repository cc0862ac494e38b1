"""Turn engine figures: capacity, cost per turn over thread length, and LangGraph's own runtime.

Run: ``.venv/bin/python benchmarks/turns.py`` (several minutes; ``--quick`` for a smoke run).

In one run, each phase on a fresh, migrated database of the server named by ``DATABASE_URL`` /
``TEST_DATABASE_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``), offline
extractive model, production settings (``benchmarks/intake.py``'s service children):

1. **capacity** per layout (``single``: the worker inside the API process, as scripts/serve.sh;
   ``deploy``: an API process and a separate ``python -m app worker``, as docker-compose) at
   1, 8, 64 threads: every thread posts a message, waits until its run finished, posts the next
   (closed loop) for ``--seconds``; turns/s, accepted->completed p50/p99 (the database's clock:
   ``agent_runs.finished_at`` minus the request's ``created_at``) and the worker process's CPU
   per turn;
2. **thread length**: one thread grown to 10, 100, 1000 turns (the turns between measurement
   windows are posted as a backlog); at each length ``--window`` turns are measured one by one:
   latency, worker CPU, PostgreSQL round trips of the worker (its connections go through a
   counting wire-protocol proxy: Sync + simple Query messages) and WAL bytes (``pg_walinspect``:
   the records touching this database's relations between two LSNs; without the extension the
   cluster-wide ``pg_current_wal_lsn`` difference);
3. **claims** at 1k/10k/100k threads: ``benchmarks/claims.py`` (issue 23 item 1), called below
   once it exists;
4. **LangGraph reference**: ``langgraph dev`` (``langgraph-api``, in-memory runtime, the extra
   ``langgraph-reference`` installed into ``.venv-lgref``: it pins structlog below ours, so it is
   kept out of the lock files) serving the same graph shape (benchmarks/langgraph_reference), the
   same closed loop; the ratio to Threadkeeper's figure of the same thread count.

Prints medians of ``--repeat`` runs side by side. Figures need a quiet machine; the ratios
measured in the same run are the robust ones on a shared one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, fresh_database, percentile, server_from_env
from benchmarks.intake import (
    READY_SECONDS,
    Connection,
    app_server,
    counting_proxy,
    create_threads,
    endpoint,
    process_cpu_seconds,
    server_pid,
    service_env,
    wait_http_ready,
)

TERMINAL = ("completed", "failed", "cancelled")
REFERENCE_DIR = ROOT / "benchmarks" / "langgraph_reference"
REFERENCE_VENV = ROOT / ".venv-lgref"


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
        beat = Path(workdir) / "worker.heartbeat"
        beat.unlink(missing_ok=True)
        worker = subprocess.Popen(
            [sys.executable, "-m", "app", "worker"],
            env={
                **os.environ,
                **env,
                "DATABASE_URL": worker_url,
                "THREADKEEPER_WORKER_HEARTBEAT_FILE": str(beat),
            },
            cwd=ROOT,
            stderr=log_file,
        )
        try:
            deadline = time.monotonic() + READY_SECONDS
            while not beat.exists():
                if worker.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the worker process did not start")
                time.sleep(0.1)
            yield base, worker.pid
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(60)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(10)


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


# --- 2. thread length ----------------------------------------------------------------------------
@dataclass
class TurnCost:
    latency_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    round_trips: list[int] = field(default_factory=list)
    wal_bytes: list[int] = field(default_factory=list)
    #: Of ``wal_bytes``, the full-page images: the first change to a page after a PostgreSQL
    #: checkpoint logs the whole page. They depend on when checkpoints fall (other databases'
    #: writes on a shared server bring them on), so they are printed apart.
    fpi_bytes: list[int] = field(default_factory=list)
    #: The turn's shape: the model calls it made (its ``assistant`` messages). The offline model looks
    #: into the Workdir once a thread holds a summary and the knowledge base has nothing, so a
    #: late turn can be a longer turn (model -> query_kb -> model -> search_workdir -> model).
    model_calls: list[int] = field(default_factory=list)
    #: ``--wal-by-relation``: per turn, WAL bytes per (relation, record type).
    wal_by_relation: list[dict[tuple[str, str], int]] = field(default_factory=list, repr=False)


class WalMeter:
    """WAL written for this database's relations between two points (pg_walinspect), else the
    whole cluster's (other databases' writes included)."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.inspect = False
        self.oid = 0
        #: The end LSN of the last ``since``.
        self.end = ""

    async def open(self) -> None:
        with contextlib.suppress(Exception):
            await self.db.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            self.inspect = True
        row = await (
            await self.db.execute("SELECT oid FROM pg_database WHERE datname = current_database()")
        ).fetchone()
        self.oid = int(row[0])

    async def lsn(self) -> str:
        row = await (await self.db.execute("SELECT pg_current_wal_flush_lsn()::text")).fetchone()
        return str(row[0])

    async def since(self, start: str) -> tuple[int, int]:
        """Bytes written since ``start`` and, of those, full-page images (0 when unknown)."""
        end = self.end = await self.lsn()
        if not self.inspect:
            row = await (
                await self.db.execute("SELECT %s::pg_lsn - %s::pg_lsn", (end, start))
            ).fetchone()
            return int(row[0]), 0
        row = await (
            await self.db.execute(
                "SELECT coalesce(sum(record_length), 0), coalesce(sum(fpi_length), 0)"
                " FROM pg_get_wal_records_info(%s, %s) WHERE block_ref LIKE %s",
                (start, end, f"%/{self.oid}/%"),
            )
        ).fetchone()
        return int(row[0]), int(row[1])

    async def by_relation(self, start: str, end: str) -> dict[tuple[str, str], int]:
        """WAL bytes between two LSNs grouped by the relation of each record's first block
        reference (a TOAST relation as ``toast(<table>)``) and record type, the full-page images
        apart, records of this database only; a relation dropped since shows as its file node."""
        if not self.inspect:
            return {}
        cur = await self.db.execute(
            """
            WITH r AS (
                SELECT record_length - fpi_length AS record_length,
                       resource_manager || '/' || record_type AS kind,
                       substring(block_ref FROM 'rel [0-9]+/[0-9]+/([0-9]+)')::oid AS node,
                       substring(block_ref FROM 'rel ([0-9]+)/')::oid AS spc
                FROM pg_get_wal_records_info(%(start)s, %(end)s)
                WHERE block_ref LIKE %(db)s
                UNION ALL
                SELECT fpi_length, 'full-page images',
                       substring(block_ref FROM 'rel [0-9]+/[0-9]+/([0-9]+)')::oid,
                       substring(block_ref FROM 'rel ([0-9]+)/')::oid
                FROM pg_get_wal_records_info(%(start)s, %(end)s)
                WHERE block_ref LIKE %(db)s AND fpi_length > 0
            ), named AS (
                SELECT r.record_length, r.kind, r.node,
                       pg_filenode_relation(
                           CASE WHEN r.spc = d.dattablespace THEN 0 ELSE r.spc END, r.node
                       ) AS rel
                FROM r CROSS JOIN (
                    SELECT dattablespace FROM pg_database WHERE datname = current_database()
                ) d
            )
            SELECT coalesce(
                       (SELECT 'toast(' || o.relname || ')' FROM pg_class o
                        WHERE o.reltoastrelid = n.rel),
                       (SELECT t.relname || ' (toast index)' FROM pg_class t
                        JOIN pg_index i ON i.indrelid = t.reltoastrelid
                        WHERE i.indexrelid = n.rel),
                       n.rel::regclass::text,
                       'filenode ' || n.node
                   ) AS relation,
                   n.kind,
                   sum(n.record_length)::bigint
            FROM named n
            GROUP BY 1, 2
            """,
            {"start": start, "end": end, "db": f"%/{self.oid}/%"},
        )
        return {(str(name), str(kind)): int(size) for name, kind, size in await cur.fetchall()}


async def model_calls(db: Any, thread_id: str) -> int:
    """The thread's model calls so far (its stored ``assistant`` messages)."""
    cur = await db.execute(
        "SELECT count(*) FROM messages WHERE conversation_id = %s AND role = 'assistant'",
        (thread_id,),
    )
    row = await cur.fetchone()
    return int(row[0])


def thread_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid``'s live threads, to the nanosecond (``/proc/<pid>/task/*/schedstat``;
    ``/proc/<pid>/stat`` counts in clock ticks of 10 ms, too coarse for one turn). A thread that
    ends between two readings takes its time with it: the worker's threads live as long as it."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int((task / "schedstat").read_text().split()[0])
    except OSError:
        return process_cpu_seconds(pid)
    return total / 1e9 if total else process_cpu_seconds(pid)


# What the knowledge base holds in the thread-length phase. ``empty``: ``query_kb`` finds nothing,
# so once the thread holds a summary or offloaded results the offline model also searches the
# Workdir (a turn becomes three model calls instead of two). ``answers``: one document answers
# every turn's question, so every turn has the same shape (``query_kb``, then the answer quoting
# it) at every length, and each turn adds a real result to the context.
KB_DOCUMENT = {
    "title": "Leases",
    "url": "https://docs.example/leases",
    "content": "A run lease expires when the worker stops sending heartbeats. "
    "Each lease is renewed by every heartbeat of the worker that holds it.",
}


async def thread_length(
    server: str,
    lengths: list[int],
    window: int,
    logs: Path,
    kb: str = "empty",
    by_relation: bool = False,
) -> dict[int, TurnCost]:
    import psycopg

    from app.db.urls import libpq_url

    out: dict[int, TurnCost] = {}
    async with database(server) as url:
        workdir = tempfile.mkdtemp(prefix="tk_turns_")
        async with counting_proxy(url) as (proxy, proxied):
            stack = contextlib.ExitStack()
            # The worker talks through the proxy, which runs on this loop: start and stop the
            # service off it.
            base, pid = await asyncio.to_thread(
                stack.enter_context, service("deploy", url, proxied, workdir, logs)
            )
            try:
                await wait_http_ready(base, "/ready", time.monotonic() + READY_SECONDS)
                conn = Connection(*endpoint(base))
                if kb == "answers":
                    status, body = await conn.request(
                        "POST",
                        "/v1/knowledge-bases/default/documents",
                        json.dumps(KB_DOCUMENT).encode(),
                    )
                    assert status == 201, body
                (thread_id,) = await create_threads(base, 1)
                async with (
                    completions(url) as done,
                    await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True) as db,
                ):
                    wal = WalMeter(db)
                    await wal.open()
                    n = 0
                    for length in sorted(lengths):
                        backlog = [
                            await post(conn, thread_id, n + i)
                            for i in range(max(0, length - window - n))
                        ]
                        n += len(backlog)
                        for request_id in backlog:
                            await asyncio.wait_for(done.wait(request_id), 600)
                        cost = out[length] = TurnCost()
                        while n < length:
                            await asyncio.sleep(0.05)  # the claim loop settles
                            calls0 = await model_calls(db, thread_id)
                            rt0, cpu0, lsn0 = (
                                proxy.counts.round_trips,
                                thread_cpu_seconds(pid),
                                await wal.lsn(),
                            )
                            cost.latency_ms.append(await turn(conn, done, thread_id, n) * 1000)
                            cost.cpu_ms.append((thread_cpu_seconds(pid) - cpu0) * 1000)
                            cost.round_trips.append(proxy.counts.round_trips - rt0)
                            written, images = await wal.since(lsn0)
                            cost.wal_bytes.append(written)
                            cost.fpi_bytes.append(images)
                            if by_relation:
                                cost.wal_by_relation.append(await wal.by_relation(lsn0, wal.end))
                            cost.model_calls.append(await model_calls(db, thread_id) - calls0)
                            n += 1
                conn.close()
            finally:
                await asyncio.to_thread(stack.close)
    return out


# --- 3. claims (issue 23 item 1: benchmarks/claims.py) -------------------------------------------
async def claims_figures(server: str, quick: bool) -> list[str]:
    """Claim latency and idle database time at 1k/10k/100k threads (``benchmarks/claims.py``,
    old claim query side by side with the new one); ``quick``: 1k only, shorter idle window."""
    from benchmarks import claims

    sizes = [1_000] if quick else list(claims.SIZES)
    figures = await claims.measure(
        server, sizes, repeats=5 if quick else 15, idle_seconds=5 if quick else 20
    )
    return claims.report(figures).splitlines()


# --- 4. LangGraph's own runtime --------------------------------------------------------------------
def reference_venv() -> Path | None:
    """``.venv-lgref`` with the ``langgraph-reference`` extra (made once with uv)."""
    langgraph = REFERENCE_VENV / "bin" / "langgraph"
    if langgraph.exists():
        return langgraph
    uv = shutil.which("uv") or str(ROOT / ".venv" / "bin" / "uv")
    try:
        subprocess.run([uv, "venv", "-q", "-p", "3.11", str(REFERENCE_VENV)], check=True, cwd=ROOT)
        subprocess.run(
            [uv, "pip", "install", "-q", "-e", ".[langgraph-reference]"],
            check=True,
            cwd=ROOT,
            env={**os.environ, "VIRTUAL_ENV": str(REFERENCE_VENV)},
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"langgraph reference: cannot install the extra ({exc})", file=sys.stderr)
        return None
    return langgraph if langgraph.exists() else None


@contextlib.contextmanager
def reference_server(
    langgraph: Path, log_path: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGSMITH_API_KEY": "",
        "PYTHONPATH": str(ROOT),
        "LOG_LEVEL": "WARNING",
    }
    # ``langgraph dev`` pickles its in-memory runtime here at exit and loads it at start: each
    # run starts empty, as Threadkeeper's fresh database does (the directory is git-ignored).
    shutil.rmtree(REFERENCE_DIR / ".langgraph_api", ignore_errors=True)
    with log_path.open("ab") as log_file:
        proc = subprocess.Popen(
            [
                str(langgraph),
                "dev",
                "--no-browser",
                "--no-reload",
                "--allow-blocking",
                "--port",
                str(port),
                "--server-log-level",
                "WARNING",
                "--config",
                "langgraph.json",
            ],
            cwd=REFERENCE_DIR,
            env=env,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,
        )
        try:
            yield f"http://127.0.0.1:{port}", proc
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def tree_cpu_seconds(pid: int) -> float:
    """CPU of a process and its children (``langgraph dev`` runs the server in a child)."""
    total = 0.0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError):
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            if int(proc.name) == pid or os.getsid(int(proc.name)) == pid:
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


async def reference(thread_counts: list[int], seconds: float, logs: Path) -> dict[int, Capacity]:
    from langgraph_sdk import get_client

    langgraph = reference_venv()
    if langgraph is None:
        return {}
    out: dict[int, Capacity] = {}
    with reference_server(langgraph, logs) as (base, proc):
        client = get_client(url=base, api_key=None)
        deadline = time.monotonic() + READY_SECONDS
        while True:
            try:
                await client.assistants.search(limit=1)
                break
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    print("langgraph reference: the server did not start", file=sys.stderr)
                    return {}
                await asyncio.sleep(0.3)
        for count in thread_counts:
            threads = [str((await client.threads.create())["thread_id"]) for _ in range(count)]

            async def one(_: int, thread_id: str, n: int) -> float:
                t0 = time.perf_counter()
                await client.runs.wait(
                    thread_id,
                    "agent",
                    input={
                        "messages": [
                            {"role": "user", "content": f"turn {n}: when does lease {n} expire?"}
                        ]
                    },
                )
                return time.perf_counter() - t0

            out[count] = await closed_loop(
                threads, seconds, one, lambda: tree_cpu_seconds(proc.pid)
            )
    return out


# --- report ----------------------------------------------------------------------------------------
def median_capacity(runs: list[Capacity]) -> Capacity:
    return Capacity(
        statistics.median(r.turns_per_second for r in runs),
        statistics.median(r.p50_ms for r in runs),
        statistics.median(r.p99_ms for r in runs),
        statistics.median(r.cpu_ms_per_turn for r in runs),
    )


def print_capacity(
    results: dict[str, dict[int, list[Capacity]]], ref: dict[int, list[Capacity]]
) -> None:
    print("\ncapacity (closed loop, one worker process, medians)")
    print(
        f"{'layout':<10}{'threads':>8}{'turns/s':>10}{'p50 ms':>10}{'p99 ms':>10}"
        f"{'CPU ms/turn':>13}{'LangGraph turns/s':>19}{'ratio':>8}"
    )
    for layout, by_count in results.items():
        for count, runs in by_count.items():
            m = median_capacity(runs)
            r = median_capacity(ref[count]) if ref.get(count) else None
            ref_rate = f"{r.turns_per_second:.1f}" if r else "n/a"
            ratio = f"{m.turns_per_second / r.turns_per_second:.2f}" if r else "n/a"
            print(
                f"{layout:<10}{count:>8}{m.turns_per_second:>10.1f}{m.p50_ms:>10.0f}"
                f"{m.p99_ms:>10.0f}{m.cpu_ms_per_turn:>13.1f}{ref_rate:>19}{ratio:>8}"
            )
    for count, runs in ref.items():
        m = median_capacity(runs)
        print(
            f"{'langgraph':<10}{count:>8}{m.turns_per_second:>10.1f}{m.p50_ms:>10.0f}"
            f"{m.p99_ms:>10.0f}{m.cpu_ms_per_turn:>13.1f}"
        )


def print_lengths(costs: dict[int, list[TurnCost]], kb: str) -> None:
    print(f"\nthread length (one thread, deploy layout, knowledge base {kb}, medians per turn)")
    print(
        f"{'turns':>6}{'latency ms':>12}{'worker CPU ms':>15}{'round trips':>13}{'WAL KB':>9}"
        f"{'of it FPI KB':>14}{'model calls':>13}"
    )
    first: tuple[float, float] | None = None
    for length, runs in sorted(costs.items()):
        lat = statistics.median(x for r in runs for x in r.latency_ms)
        cpu = statistics.median(x for r in runs for x in r.cpu_ms)
        rts = statistics.median(x for r in runs for x in r.round_trips)
        wal = statistics.median(x for r in runs for x in r.wal_bytes)
        fpi = statistics.median(x for r in runs for x in r.fpi_bytes)
        calls = statistics.median(x for r in runs for x in r.model_calls) or 1
        first = first or (lat, lat / calls)
        print(
            f"{length:>6}{lat:>12.0f}{cpu:>15.1f}{rts:>13.0f}{wal / 1024:>9.1f}{fpi / 1024:>14.1f}"
            f"{calls:>13.0f}"
            f"   x{lat / first[0]:.2f} of the shortest per turn,"
            f" x{lat / calls / first[1]:.2f} per model call"
        )


def print_wal_by_relation(costs: dict[int, list[TurnCost]], kb: str) -> None:
    """Mean WAL bytes per turn by relation, and under each by record type (``Heap/INSERT``,
    ``Heap/LOCK``, ``Btree/INSERT_LEAF``..., and ``full-page images``), over every measured turn
    of each length."""
    for length, runs in sorted(costs.items()):
        turns = [t for r in runs for t in r.wal_by_relation]
        if not turns:
            continue
        kinds: dict[str, dict[str, int]] = {}
        for t in turns:
            for (name, kind), size in t.items():
                kinds.setdefault(name, {})
                kinds[name][kind] = kinds[name].get(kind, 0) + size
        n = len(turns)
        print(
            f"\nWAL by relation at {length} turns, knowledge base {kb}"
            f" (mean bytes per turn over {n} turns)"
        )
        for name, by_kind in sorted(kinds.items(), key=lambda kv: -sum(kv[1].values())):
            print(f"  {name:<52}{sum(by_kind.values()) / n:>10.0f}")
            for kind, size in sorted(by_kind.items(), key=lambda kv: -kv[1]):
                print(f"      {kind:<48}{size / n:>10.0f}")
        total = sum(sum(k.values()) for k in kinds.values())
        print(f"  {'total':<52}{total / n:>10.0f}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: short, small")
    parser.add_argument("--threads", default="1,8,64")
    parser.add_argument("--layouts", default="single,deploy")
    parser.add_argument("--lengths", default="10,100,1000")
    parser.add_argument("--window", type=int, default=5, help="turns measured per length")
    parser.add_argument("--seconds", type=float, default=10.0, help="per capacity phase")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--phases", default="capacity,length,claims,reference")
    parser.add_argument(
        "--kb",
        default="empty,answers",
        help="thread-length phase: knowledge base empty and/or answering every turn",
    )
    parser.add_argument(
        "--wal-by-relation",
        action="store_true",
        help="thread length: also print the WAL bytes per turn by relation and record type",
    )
    args = parser.parse_args()
    if args.quick:
        args.threads, args.lengths, args.seconds, args.repeat = "1,8", "10,30", 4.0, 1
    counts = [int(x) for x in args.threads.split(",")]
    phases = set(args.phases.split(","))
    server = server_from_env()
    logs = Path(tempfile.mkdtemp(prefix="tk_turns_logs_"))
    print(f"server logs: {logs}")
    results: dict[str, dict[int, list[Capacity]]] = {}
    ref: dict[int, list[Capacity]] = {}
    costs: dict[str, dict[int, list[TurnCost]]] = {}
    for i in range(args.repeat):
        if "capacity" in phases:
            for layout in args.layouts.split(","):
                got = await capacity(layout, server, counts, args.seconds, logs / "service.log")
                for count, cap in got.items():
                    results.setdefault(layout, {}).setdefault(count, []).append(cap)
                    print(f"run {i + 1}: {layout} {count} threads: {cap}", flush=True)
        if "reference" in phases:
            for count, cap in (
                await reference(counts, args.seconds, logs / "langgraph.log")
            ).items():
                ref.setdefault(count, []).append(cap)
                print(f"run {i + 1}: langgraph {count} threads: {cap}", flush=True)
        if "length" in phases:
            lengths = [int(x) for x in args.lengths.split(",")]
            for kb in args.kb.split(","):
                for length, cost in (
                    await thread_length(
                        server,
                        lengths,
                        args.window,
                        logs / "length.log",
                        kb,
                        args.wal_by_relation,
                    )
                ).items():
                    costs.setdefault(kb, {}).setdefault(length, []).append(cost)
                    print(f"run {i + 1}: kb {kb}: {length} turns: {cost}", flush=True)
    if results or ref:
        print_capacity(results, ref)
        if "reference" in phases and not ref:
            print("LangGraph reference: not measured (see stderr)")
    for kb, by_length in costs.items():
        print_lengths(by_length, kb)
        if args.wal_by_relation:
            print_wal_by_relation(by_length, kb)
    if "claims" in phases:
        print("\nclaims")
        for line in await claims_figures(server, args.quick):
            print(line)


if __name__ == "__main__":
    asyncio.run(main())
