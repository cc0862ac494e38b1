"""Real providers at real latency: turns per second against the ideal, the latency the service
adds, its PostgreSQL connections, memory and CPU per turn, failed runs and retries, beside
LangGraph's own runtime on the same provider.

Run: ``.venv/bin/python benchmarks/providers.py`` (about 20 minutes; ``--quick`` for a smoke run).

The provider is the tests' OpenAI-protocol stub (``tests/support/openai_server.py``) served apart,
in its own process on one event loop: every completion streams for ``latency`` seconds (a turn
is two: a ``query_kb`` call, then a 60-word answer in 20 pieces, or ``--pieces``), and ``fault
rate`` of them get a transient fault (429 with ``Retry-After: 1``, 503 "overloaded", or the
connection dropped mid-stream). The stub's own overhead on this machine (about 0.3 s per call
at 100 streams, 0.9 s at 1000, measured with a bare client) counts as added latency for both
runtimes. Each phase:

- Threadkeeper, single layout (the worker inside the API process, as ``scripts/serve.sh``),
  default settings (``--env NAME=VALUE`` overrides one), on a fresh, migrated database of the
  server named by ``DATABASE_URL`` / ``TEST_DATABASE_URL``; ``--threads`` threads post at once
  and each posts its next turn when the last one finished (closed loop) for ``--seconds``;
- ``offline``: the same service and closed loop on the offline extractive model (the same turn
  shape: a ``query_kb`` call, then an answer; no provider, no latency): the CPU a turn costs
  without the model calls, in the same run (the ratio of the two is printed);
- LangGraph's runtime (``langgraph dev``, in-memory, installed into ``.venv-lgref``: see
  ``benchmarks/turns_reference.py``) serving the same graph shape on the same provider with the
  OpenAI client's default retries, driven by the same closed loop (``runs.wait``).

Printed per phase and runtime: turns/s and the ideal (threads / the provider's time per turn),
the latency added over the provider's own time per turn (p50/p99 of accepted -> finished:
the database's clock for Threadkeeper, the client's for LangGraph), the most PostgreSQL
connections the service held (``pg_stat_activity``, its ``threadkeeper-*`` application names),
the most RSS of the serving process (tree), its CPU per turn, the time its garbage collector
took per turn (``threadkeeper_gc_seconds_total``), runs that failed or did not finish
within ``--drain`` seconds after the window, and retries as the provider saw them (a request whose
body is the same as one it answered with a fault).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import OPENAI_STUB, child_server, percentile, server_from_env
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
from benchmarks.turns_driver import completions, database
from benchmarks.turns_reference import (
    reference_ready,
    reference_server,
    reference_venv,
    tree_cpu_seconds,
)

#: Model calls per turn (``query_kb``, then the answer).
CALLS_PER_TURN = 2


@dataclass(frozen=True)
class Phase:
    threads: int
    latency: float
    fault_rate: float = 0.0
    #: Streamed text pieces of an answer (``--pieces``): 20 (three words each), 60 (a word
    #: each, as a provider streaming a token per chunk).
    pieces: int = 20

    @property
    def name(self) -> str:
        faults = f", {self.fault_rate:.0%} faults" if self.fault_rate else ""
        return f"{self.threads} threads @{self.latency:g}s{faults}"

    @property
    def turn_seconds(self) -> float:
        """The provider's own time per turn."""
        return CALLS_PER_TURN * self.latency

    @property
    def ideal(self) -> float:
        return self.threads / self.turn_seconds

    @staticmethod
    def parse(text: str) -> Phase:
        """``THREADS@LATENCY[/FAULT_RATE]``, e.g. ``100@0.5/0.2``."""
        threads, _, rest = text.partition("@")
        latency, _, rate = rest.partition("/")
        return Phase(int(threads), float(latency), float(rate or 0))


PHASES = "100@1,1000@1,100@0.5/0.2"


@dataclass
class Figures:
    turns_per_second: float = 0.0
    added_p50_ms: float = 0.0
    added_p99_ms: float = 0.0
    pg_connections: int | None = None
    rss_mb: float = 0.0
    cpu_ms_per_turn: float = 0.0
    #: The serving process's garbage collections (``threadkeeper_gc_seconds_total``) over the
    #: phase's turns (None: not served, e.g. LangGraph's runtime).
    gc_ms_per_turn: float | None = None
    failed: int = 0
    unfinished: int = 0
    turns: int = 0
    provider: dict[str, Any] = field(default_factory=dict)


# --- the provider -------------------------------------------------------------------------------
@contextlib.contextmanager
def provider(phase: Phase, log_path: Path) -> Iterator[str]:
    """The stub served apart for one phase; its base URL (``.../v1``)."""
    args = ["--latency", str(phase.latency), "--fault-rate", str(phase.fault_rate), "--seed", "7"]
    args += ["--max-pieces", str(phase.pieces)]
    with log_path.open("ab") as log, child_server(str(OPENAI_STUB), args, {}, stderr=log) as base:
        yield f"{base}/v1"


async def provider_stats(base_v1: str) -> dict[str, Any]:
    conn = Connection(*endpoint(base_v1.removesuffix("/v1")))
    try:
        status, body = await conn.request("GET", "/stats", auth=False)
        return dict(json.loads(body)) if status == 200 else {}
    finally:
        conn.close()


async def wait_provider(base_v1: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(OSError, ValueError):
            if await provider_stats(base_v1):
                return
        if time.monotonic() > deadline:
            raise SystemExit("the provider stub did not start")
        await asyncio.sleep(0.1)


# --- what a process holds -------------------------------------------------------------------------
def tree_rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and the processes of its session (``langgraph dev``'s child)."""
    total = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError):
            if int(proc.name) != pid and os.getsid(int(proc.name)) != pid:
                continue
            for line in (proc / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


class Sampler:
    """The most RSS (and PostgreSQL connections of the service) seen, every half second."""

    def __init__(self, pid: int, database_url: str | None) -> None:
        self.pid, self.database_url = pid, database_url
        self.rss_mb = 0.0
        self.connections: int | None = None

    async def run(self, stop: asyncio.Event) -> None:
        db = None
        if self.database_url is not None:
            import psycopg

            from app.db.urls import libpq_url

            db = await psycopg.AsyncConnection.connect(
                libpq_url(self.database_url), autocommit=True
            )
            self.connections = 0
        try:
            while not stop.is_set():
                self.rss_mb = max(self.rss_mb, tree_rss_mb(self.pid))
                if db is not None:
                    row = await (
                        await db.execute(
                            "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                            "current_database() AND application_name LIKE 'threadkeeper%'"
                        )
                    ).fetchone()
                    self.connections = max(self.connections or 0, int(row[0]) if row else 0)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.5)
        finally:
            if db is not None:
                await db.close()


@contextlib.asynccontextmanager
async def sampling(pid: int, database_url: str | None) -> AsyncIterator[Sampler]:
    sampler, stop = Sampler(pid, database_url), asyncio.Event()
    task = asyncio.create_task(sampler.run(stop))
    try:
        yield sampler
    finally:
        stop.set()
        await task


def question(thread: int, n: int) -> str:
    """A turn's text, different on every thread (the provider tells a retry by its body)."""
    return f"thread {thread}, turn {n}: when does lease {n} expire?"


# --- the closed loop ------------------------------------------------------------------------------
#: One turn: (completed?, seconds from accepted to finished).
OneTurn = Callable[[int, str, int], Awaitable[tuple[bool, float]]]


async def closed_loop(
    phase: Phase,
    threads: list[str],
    seconds: float,
    drain: float,
    one_turn: OneTurn,
    cpu: Callable[[], float],
    provider_seconds: float | None = None,
) -> Figures:
    """Every thread posts at once, then its next turn when the last finished, for ``seconds``;
    turns still running then are waited for at most ``drain`` seconds (their latency counts,
    not their rate). Added latency is over ``provider_seconds`` a turn (the phase's unless
    told: 0 for the offline model)."""
    figures = Figures()
    latencies: list[float] = []
    in_window = 0
    cpu0, t0 = cpu(), time.perf_counter()
    stop_at = t0 + seconds
    cpu_at_stop: list[float] = []

    async def loop(i: int, thread_id: str) -> None:
        nonlocal in_window
        n = 1
        while time.perf_counter() < stop_at:
            try:
                ok, took = await one_turn(i, thread_id, n)
            except Exception:  # the turn could not even be posted
                ok, took = False, None
            if ok and time.perf_counter() <= stop_at:
                in_window += 1  # turns/s counts completed turns only
            figures.turns += 1
            if took is not None:
                latencies.append(took)
            figures.failed += 0 if ok else 1
            n += 1

    async def mark_stop() -> None:
        await asyncio.sleep(max(0.0, stop_at - time.perf_counter()))
        cpu_at_stop.append(cpu())

    tasks = [asyncio.create_task(loop(i, t)) for i, t in enumerate(threads)]
    await mark_stop()
    _, pending = await asyncio.wait(tasks, timeout=drain)
    for task in pending:
        task.cancel()
    figures.unfinished = len(pending)
    await asyncio.gather(*pending, return_exceptions=True)
    figures.turns_per_second = in_window / seconds
    figures.cpu_ms_per_turn = (cpu_at_stop[0] - cpu0) / max(in_window, 1) * 1000
    own = phase.turn_seconds if provider_seconds is None else provider_seconds
    added = [max(0.0, x - own) * 1000 for x in latencies] or [0.0]
    figures.added_p50_ms = percentile(added, 0.5)
    figures.added_p99_ms = percentile(added, 0.99)
    return figures


# --- Threadkeeper --------------------------------------------------------------------------------
async def threadkeeper(
    phase: Phase,
    server: str,
    seconds: float,
    drain: float,
    extra: dict[str, str],
    logs: Path,
    workers: int = 0,
    offline: bool = False,
) -> Figures:
    """The single layout's phase; ``workers`` more ``python -m app worker`` processes beside it
    (``--extra-workers``: what another process per core would give; their CPU counts too).
    ``offline``: the same turns on the offline extractive model (no provider: the CPU a turn
    costs without the model calls, in the same run)."""
    with provider(phase, logs / "provider.log") as base_v1:
        await wait_provider(base_v1)
        async with database(server) as url:
            workdir = tempfile.mkdtemp(prefix="tk_providers_")
            env = {
                **service_env(url, workdir, worker=True),
                "THREADKEEPER_LLM_BASE_URL": base_v1,
                "THREADKEEPER_LLM_API_KEY": "bench-provider-key",
                "THREADKEEPER_LLM_MODEL": "gpt-test",
                **extra,
                **({"THREADKEEPER_LLM_BASE_URL": ""} if offline else {}),
            }
            try:
                with (
                    app_server("service", env, logs / "service.log") as base,
                    (logs / "workers.log").open("ab") as worker_log,
                    contextlib.ExitStack() as stack,
                ):
                    await wait_http_ready(base, "/ready", time.monotonic() + READY_SECONDS)
                    pids = [
                        stack.enter_context(
                            worker_process(env, tempfile.mkdtemp(dir=workdir), worker_log)
                        ).pid
                        for _ in range(workers)
                    ]
                    return await _drive_threadkeeper(
                        phase, base, base_v1, url, seconds, drain, pids, 0.0 if offline else None
                    )
            finally:
                shutil.rmtree(workdir, ignore_errors=True)


async def _drive_threadkeeper(
    phase: Phase,
    base: str,
    base_v1: str,
    url: str,
    seconds: float,
    drain: float,
    workers: list[int],
    provider_seconds: float | None = None,
) -> Figures:
    pid = server_pid(base)
    threads = await create_threads(base, phase.threads + 1)
    conns = [Connection(*endpoint(base)) for _ in threads]
    try:
        async with completions(url) as done:

            async def one(i: int, thread_id: str, n: int) -> tuple[bool, float]:
                body = json.dumps({"content": question(i, n)}).encode()
                status, out = await conns[i].request(
                    "POST", f"/v1/threads/{thread_id}/messages", body
                )
                if status != 202:
                    return False, 0.0
                finished, took = await done.wait(str(json.loads(out)["request_id"]))
                return finished == "completed", took

            await one(phase.threads, threads[-1], 0)  # a warm-up turn on a thread of its own
            before = await provider_stats(base_v1)
            gc_before = await _service_metric(base, "threadkeeper_gc_seconds_total")
            async with sampling(pid, url) as sampler:
                figures = await closed_loop(
                    phase,
                    threads[:-1],
                    seconds,
                    drain,
                    one,
                    lambda: sum(map(process_cpu_seconds, [pid, *workers])),
                    provider_seconds,
                )
            figures.rss_mb, figures.pg_connections = sampler.rss_mb, sampler.connections
            figures.provider = _difference(await provider_stats(base_v1), before)
            figures.provider["service_retries"] = await _service_metric(
                base, "threadkeeper_provider_retries_total"
            )
            gc_after = await _service_metric(base, "threadkeeper_gc_seconds_total")
            if gc_before is not None and gc_after is not None:
                figures.gc_ms_per_turn = (gc_after - gc_before) / max(figures.turns, 1) * 1000
            return figures
    finally:
        for c in conns:
            c.close()


async def _service_metric(base: str, name: str) -> float | None:
    """The sum of counter ``name`` over its labels, from /metrics (None: not served)."""
    conn = Connection(*endpoint(base))
    try:
        status, body = await conn.request("GET", "/metrics", auth=False)
    finally:
        conn.close()
    total = None
    for line in body.decode().splitlines() if status == 200 else []:
        if line.startswith((f"{name} ", f"{name}{{")):
            total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
    return total


def _difference(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in after.items():
        if key.startswith("max_"):  # a high-water mark, not a count
            out[key] = value
        elif isinstance(value, dict):
            out[key] = {k: v - before.get(key, {}).get(k, 0) for k, v in value.items()}
        else:
            out[key] = value - before.get(key, 0)
    return out


# --- LangGraph's runtime -----------------------------------------------------------------------
async def langgraph(phase: Phase, seconds: float, drain: float, logs: Path) -> Figures | None:
    import httpx
    from langgraph_sdk.client import LangGraphClient

    binary = reference_venv()
    if binary is None:
        return None
    with provider(phase, logs / "provider.log") as base_v1:
        await wait_provider(base_v1)
        os.environ["TK_PROVIDER_BASE_URL"] = base_v1  # read by the reference graph
        with reference_server(binary, logs / "langgraph.log") as (base, proc):
            # The SDK's own client: one connection per thread, as our closed loop has (its
            # defaults, 100 connections and a 5 s pool wait, failed turns on the client side).
            client = LangGraphClient(
                httpx.AsyncClient(
                    base_url=base,
                    limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
                    timeout=httpx.Timeout(connect=30, read=600, write=600, pool=600),
                )
            )
            if not await reference_ready(client, proc):
                return None
            threads = [
                str((await client.threads.create())["thread_id"]) for _ in range(phase.threads + 1)
            ]

            async def one(i: int, thread_id: str, n: int) -> tuple[bool, float]:
                started = time.perf_counter()
                content = question(i, n)
                try:
                    await client.runs.wait(
                        thread_id,
                        "provider_agent",
                        input={"messages": [{"role": "user", "content": content}]},
                    )
                except Exception:
                    return False, time.perf_counter() - started
                return True, time.perf_counter() - started

            await one(phase.threads, threads[-1], 0)
            before = await provider_stats(base_v1)
            async with sampling(proc.pid, None) as sampler:
                figures = await closed_loop(
                    phase, threads[:-1], seconds, drain, one, lambda: tree_cpu_seconds(proc.pid)
                )
            figures.rss_mb = sampler.rss_mb
            figures.provider = _difference(await provider_stats(base_v1), before)
            return figures


# --- report ----------------------------------------------------------------------------------------
HEADER = (
    f"{'phase':<31}{'runtime':<14}{'turns/s':>8}{'ideal':>7}{'of ideal':>9}{'added p50':>10}"
    f"{'added p99':>10}{'PG conns':>9}{'RSS MB':>8}{'CPU ms/turn':>12}{'GC ms/turn':>11}"
    f"{'failed':>8}"
    f"{'unfinished':>11}{'retries':>8}"
)


def row(phase: Phase, runtime: str, f: Figures) -> str:
    conns = "n/a" if f.pg_connections is None else str(f.pg_connections)
    gc_ms = "n/a" if f.gc_ms_per_turn is None else f"{f.gc_ms_per_turn:.1f}"
    return (
        f"{phase.name:<31}{runtime:<14}{f.turns_per_second:>8.1f}{phase.ideal:>7.0f}"
        f"{f.turns_per_second / phase.ideal:>9.0%}{f.added_p50_ms:>8.0f}ms{f.added_p99_ms:>8.0f}ms"
        f"{conns:>9}{f.rss_mb:>8.0f}{f.cpu_ms_per_turn:>12.1f}{gc_ms:>11}{f.failed:>8}"
        f"{f.unfinished:>11}"
        f"{f.provider.get('retries', 0):>8}"
    )


def ratio_line(value: float, what: str, of: str) -> str:
    return f"{'':<31}{'ratio':<14}x{value:.2f} {what} ({of})"


def report(
    results: list[tuple[Phase, Figures | None, Figures | None, Figures | None]],
    tk_name: str = "threadkeeper",
) -> None:
    print("\nproviders (closed loop, single layout, default settings)")
    print(HEADER)
    for phase, tk, lg, off in results:
        if tk is not None:
            print(row(phase, tk_name, tk))
        if off is not None:
            print(row(phase, "offline", off))
        if tk is not None and off is not None and off.cpu_ms_per_turn:
            print(
                ratio_line(
                    tk.cpu_ms_per_turn / off.cpu_ms_per_turn,
                    "CPU ms/turn",
                    "provider path / offline model",
                )
            )
        if lg is not None:
            print(row(phase, "langgraph", lg))
        if tk is not None and lg is not None and lg.turns_per_second:
            print(
                ratio_line(
                    tk.turns_per_second / lg.turns_per_second, "turns/s", "Threadkeeper / LangGraph"
                )
            )
    for phase, tk, lg, off in results:
        for name, f in (("threadkeeper", tk), ("offline", off), ("langgraph", lg)):
            if f is not None:
                print(f"{phase.name} {name}: turns {f.turns}, provider {f.provider}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--phases", default=PHASES, help="THREADS@LATENCY[/FAULT_RATE],...")
    parser.add_argument("--seconds", type=float, default=30.0, help="closed loop per phase")
    parser.add_argument("--drain", type=float, default=120.0, help="wait for running turns")
    parser.add_argument(
        "--runtimes",
        default="threadkeeper,offline,langgraph",
        help="threadkeeper (on the provider), offline (the same turns on the offline model), "
        "langgraph (its runtime on the provider)",
    )
    parser.add_argument(
        "--env", action="append", default=[], help="NAME=VALUE for Threadkeeper's service"
    )
    parser.add_argument(
        "--extra-workers",
        type=int,
        default=0,
        help="more `python -m app worker` processes beside the single layout's (CPU summed)",
    )
    parser.add_argument(
        "--pieces",
        type=int,
        default=20,
        help="streamed pieces of the 60-word answer (60: a word per chunk, as most providers)",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: small and short")
    args = parser.parse_args()
    tk_name = "threadkeeper" + (f"+{args.extra_workers}w" if args.extra_workers else "")
    if args.quick:
        args.phases, args.seconds, args.drain = "10@0.2,10@0.2/0.2", 4.0, 60.0
    extra = dict(item.split("=", 1) for item in args.env)
    runtimes = set(args.runtimes.split(","))
    server = server_from_env()
    logs = Path(tempfile.mkdtemp(prefix="tk_providers_logs_"))
    print(f"server logs: {logs}", flush=True)
    results: list[tuple[Phase, Figures | None, Figures | None, Figures | None]] = []
    for phase in (replace(Phase.parse(p), pieces=args.pieces) for p in args.phases.split(",")):
        tk = lg = off = None
        if "threadkeeper" in runtimes:
            tk = await threadkeeper(
                phase, server, args.seconds, args.drain, extra, logs, args.extra_workers
            )
            print(row(phase, tk_name, tk), flush=True)
        if "offline" in runtimes:
            off = await threadkeeper(
                phase, server, args.seconds, args.drain, extra, logs, args.extra_workers, True
            )
            print(row(phase, "offline", off), flush=True)
        if "langgraph" in runtimes:
            lg = await langgraph(phase, args.seconds, args.drain, logs)
            if lg is not None:
                print(row(phase, "langgraph", lg), flush=True)
        results.append((phase, tk, lg, off))
    report(results, tk_name)


if __name__ == "__main__":
    asyncio.run(main())
