"""Intake throughput: PostMessage against the real service and against a minimal floor app.

Run: ``.venv/bin/python benchmarks/intake.py`` (about 2 minutes; ``--quick`` for a smoke run).

In one run, bounded in time:

1. two fresh, migrated databases on the server named by ``DATABASE_URL`` / ``TEST_DATABASE_URL``
   (default ``postgresql://postgres@127.0.0.1:5432/postgres``), one per app, dropped at the end;
2. **SQL per PostMessage**: sequential posts through a counting PostgreSQL wire-protocol proxy
   (in this process) with the worker off; statements = Execute + simple Query messages, round
   trips = Sync + simple Query messages the app sent (each waits for the server);
3. **idle turn latency**: the service (uvicorn child process, production settings: JSON logs at
   INFO, in-process worker, default poll interval, offline extractive model) answers single
   messages on an idle worker; accepted->started is ``agent_runs.started_at`` minus the user
   message's ``created_at`` (both the database clock);
4. **load**: closed loop (C clients posting back to back) and open loop (a fixed arrival rate,
   latency measured from the scheduled send time, at most C in flight) at C = 16 and 64, each
   for ``--seconds``; against the same service (its worker now busy with the backlog) while
   ``--compressors`` clients keep trying CompressContext on the same threads (409 thread_busy
   is the contract), then against the floor: Litestar + asyncpg doing the same work (lock the
   conversation row FOR UPDATE, take the sequence numbers, insert the message, insert the
   request) with nothing else;
5. **audit**: every 202 has exactly one user message and one request row with its content, no
   other user message or request exists on those threads (a refused post wrote nothing).

Prints requests/s and p50/p99 per phase for both apps and their ratio; exits 0 only if the audit
passes. Throughput needs a quiet machine; the ratio to the floor measured in the same run is
the robust figure on a shared one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import fresh_database, percentile, run_stoppable, server_from_env
from benchmarks.intake_floor import seed_threads
from benchmarks.intake_load import (
    Accepted,
    Phase,
    Poster,
    audit,
    closed_loop,
    compressors,
    idle_turn_latency,
    open_loop,
    sql_per_post,
)
from benchmarks.service import (
    READY_SECONDS,
    WireCounts,
    app_server,
    create_threads,
    process_cpu_seconds,
    server_pid,
    service_env,
    wait_http_ready,
    worker_process,
)

#: How the service runs: ``deploy`` as deploy/docker-compose.yml (an API process without a worker
#: and a separate ``python -m app worker`` process), ``single`` as scripts/serve.sh (one process,
#: the worker inside it), ``api`` the API process alone (no worker anywhere: the backlog only
#: grows; intake's own ceiling, as the floor measures it).
LAYOUTS = ("deploy", "single", "api")


@contextlib.contextmanager
def service_layout(layout: str, database_url: str, workdir: str, log_path: Path) -> Iterator[str]:
    env = service_env(database_url, workdir, worker=layout == "single")
    with log_path.open("ab") as log_file, app_server("service", env, log_path) as base:
        if layout != "deploy":
            yield base
            return
        with worker_process(env, workdir, log_file):
            yield base


# --- the run -------------------------------------------------------------------------------------------
async def load_phases(
    base: str, threads: list[str], args: argparse.Namespace, tag: str, compress: bool
) -> tuple[list[Phase], Phase | None, list[Accepted]]:
    accepted: list[Accepted] = []
    poster = Poster(threads, accepted, tag)
    stop = asyncio.Event()
    racing = (
        asyncio.create_task(compressors(base, threads, args.compressors, stop, args.seed))
        if compress and args.compressors
        else None
    )
    phases: list[Phase] = []
    pid = server_pid(base)
    for clients in args.concurrency:
        for run_phase in (
            closed_loop(base, poster, clients, args.seconds),
            open_loop(base, poster, clients, args.seconds, args.rate),
        ):
            before = process_cpu_seconds(pid)
            phase = await run_phase
            phase.cpu_seconds = process_cpu_seconds(pid) - before
            phases.append(phase)
    stop.set()
    compress_phase = await racing if racing is not None else None
    return phases, compress_phase, accepted


async def run(
    args: argparse.Namespace, service_dbs: dict[str, str], floor_db: str, workdir: str
) -> int:
    logs = Path(workdir) / "server.log"
    print(f"server logs: {logs}", flush=True)
    try:
        return await measure(args, service_dbs, floor_db, workdir, logs)
    except BaseException:
        if logs.exists():  # the workdir is removed on exit: show why a server failed
            print("".join(logs.read_text(errors="replace").splitlines(True)[-40:]), flush=True)
        raise


async def measure(
    args: argparse.Namespace,
    service_dbs: dict[str, str],
    floor_db: str,
    workdir: str,
    logs: Path,
) -> int:
    results: dict[str, list[Phase]] = {}
    compress: dict[str, Phase | None] = {}
    idle: dict[str, list[float]] = {}
    accepted_by: dict[str, int] = {}
    problems: list[str] = []

    # 1. SQL per PostMessage (worker off, through the counting proxy)
    sql = {
        kind: await sql_per_post(kind, db, workdir, logs, args.sql_samples)
        for kind, db in (("service", service_dbs["sql"]), ("floor", floor_db))
    }
    for layout in args.layouts:
        service_db = service_dbs[layout]
        with service_layout(layout, service_db, workdir, logs) as base:
            await wait_http_ready(base, "/ready", time.monotonic() + READY_SECONDS)
            # 2. idle worker: accepted -> started
            if layout != "api":
                idle[layout] = await idle_turn_latency(base, service_db, args.idle_samples)
            # 3. load: service (worker busy with the backlog, compressors racing), then floor
            threads = await create_threads(base, args.threads)
            results[layout], compress[layout], accepted = await load_phases(
                base, threads, args, layout, compress=True
            )
            problems += [f"{layout}: {p}" for p in audit(service_db, threads, accepted)]
            accepted_by[layout] = len(accepted)
    with app_server("floor", {"DATABASE_URL": floor_db}, logs) as base:
        await wait_http_ready(base, "/", time.monotonic() + READY_SECONDS)
        threads = seed_threads(floor_db, args.threads)
        results["floor"], _, floor_accepted = await load_phases(
            base, threads, args, "floor", compress=False
        )
        problems += [f"floor: {p}" for p in audit(floor_db, threads, floor_accepted)]
        accepted_by["floor"] = len(floor_accepted)

    report(args, results, compress, idle, sql, problems, accepted_by)
    return 0 if not problems else 1


def report(
    args: argparse.Namespace,
    results: dict[str, list[Phase]],
    compress: dict[str, Phase | None],
    idle: dict[str, list[float]],
    sql: dict[str, WireCounts],
    problems: list[str],
    accepted_by: dict[str, int],
) -> None:
    print(
        f"\nThreadkeeper intake: PostMessage on {args.threads} threads, {args.seconds:g} s per "
        f"phase, open-loop rate {args.rate:g}/s; service = production settings, offline model, "
        f"{args.compressors} CompressContext clients racing, layouts: deploy = API process + "
        f"separate worker process (deploy/docker-compose.yml), single = one process with the "
        f"in-process worker (scripts/serve.sh); floor = Litestar + asyncpg, same SQL; "
        f"{os.cpu_count()} CPUs; cpu% = the HTTP process's CPU use over the phase (100 = one "
        "core, all one Python process can use: that process was the bottleneck)"
    )
    top = max(args.concurrency)
    for layout in args.layouts:
        print(
            f"\n{layout + ' phase':<20}{'service/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'cpu%':>6}"
            f"{'floor/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'cpu%':>6}{'svc/floor':>11}"
            "  service statuses"
        )
        for svc, flo in zip(results[layout], results["floor"], strict=True):
            ratio = svc.rate() / flo.rate() if flo.rate() else float("nan")
            codes = " ".join(f"{c}:{n}" for c, n in sorted(svc.statuses.items()))
            errors = f" errors {dict(svc.errors)}" if svc.errors else ""
            print(
                f"{svc.name:<20}{svc.rate():>10.1f}{svc.p(0.5):>9.1f}{svc.p(0.99):>9.1f}"
                f"{svc.cpu_share():>6.0f}{flo.rate():>10.1f}{flo.p(0.5):>9.1f}{flo.p(0.99):>9.1f}"
                f"{flo.cpu_share():>6.0f}{ratio:>11.2f}  {codes}{errors}"
            )
        for svc, flo in zip(results[layout], results["floor"], strict=True):
            if svc.name == f"closed c={top}":
                print(
                    f"target ({layout}): >= 300 PostMessage/s at c={top} with compress racing -> "
                    f"{svc.rate():.1f}/s; within 2x of the floor -> floor/service "
                    f"{flo.rate() / svc.rate() if svc.rate() else float('inf'):.2f}x"
                )
        racing = compress.get(layout)
        if racing is not None and racing.latencies:
            codes = " ".join(f"{c}:{n}" for c, n in sorted(racing.statuses.items()))
            print(
                f"CompressContext racing ({layout}): {len(racing.latencies)} attempts, p50 "
                f"{racing.p(0.5):.1f} ms, p99 {racing.p(0.99):.1f} ms, statuses {codes}"
            )
        samples = idle.get(layout)
        if samples:
            print(
                f"turn latency accepted->started on an idle worker ({layout}, {len(samples)} "
                f"turns): p50 {percentile(samples, 0.5) * 1000:.0f} ms, p99 "
                f"{percentile(samples, 0.99) * 1000:.0f} ms"
            )
    print()
    for kind, counts in sql.items():
        n = args.sql_samples
        print(
            f"SQL per PostMessage ({kind}): {counts.statements / n:.1f} statements, "
            f"{counts.round_trips / n:.1f} round trips (client messages: "
            + ", ".join(f"{k}={v / n:.1f}" for k, v in sorted(counts.by_type.items()))
            + ")"
        )
    print(
        "\nAUDIT: "
        + " + ".join(f"{n} {kind}" for kind, n in accepted_by.items())
        + " posts accepted; "
        + (
            "PASS - nothing lost or duplicated, refused posts wrote nothing"
            if not problems
            else "FAIL"
        )
    )
    for p in problems[:50]:
        print(f"  - {p}")


def main(args: argparse.Namespace) -> int:
    if args.quick:
        args.seconds, args.rate, args.threads = 1.0, 50.0, 16
        args.idle_samples, args.sql_samples, args.concurrency = 3, 10, [4]
    server = server_from_env()
    workdir = tempfile.mkdtemp(prefix="tk-intake-")
    started = time.monotonic()
    try:
        with contextlib.ExitStack() as stack:
            # One database per layout: a layout's backlog must not load the next one's worker
            # (nor the SQL count's posts the first layout's).
            service_dbs = {
                layout: stack.enter_context(fresh_database(server, f"tk_intake_{layout}"))
                for layout in ("sql", *args.layouts)
            }
            floor_db = stack.enter_context(fresh_database(server, "tk_floor"))
            with contextlib.suppress(ImportError):
                import uvloop

                return int(uvloop.run(run(args, service_dbs, floor_db, workdir)))
            return asyncio.run(run(args, service_dbs, floor_db, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        print(f"\ntotal wall time {time.monotonic() - started:.1f} s (databases dropped)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per load phase")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--rate", type=float, default=300.0, help="open-loop arrivals per second")
    parser.add_argument("--threads", type=int, default=256, help="threads posted to")
    parser.add_argument("--compressors", type=int, default=4, help="CompressContext clients")
    parser.add_argument("--idle-samples", type=int, default=20)
    parser.add_argument("--sql-samples", type=int, default=50)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument(
        "--layouts",
        nargs="+",
        choices=LAYOUTS,
        default=list(LAYOUTS),
        help="deploy: API + separate worker process (deploy/docker-compose.yml); "
        "single: one process with the in-process worker (scripts/serve.sh)",
    )
    parser.add_argument("--quick", action="store_true", help="a few seconds: smoke test only")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(run_stoppable(lambda: main(parse_args())))
