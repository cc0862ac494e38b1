"""Turn engine figures: capacity, cost per turn over thread length, and LangGraph's own runtime.

Run: ``.venv/bin/python benchmarks/turns.py`` (several minutes; ``--quick`` for a smoke run).

In one run, each phase on a fresh, migrated database of the server named by ``DATABASE_URL`` /
``TEST_DATABASE_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``), offline
extractive model, production settings (``benchmarks/service.py``'s service children):

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
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import run_stoppable, server_from_env
from benchmarks.turns_driver import Capacity, capacity
from benchmarks.turns_length import TurnCost, thread_length
from benchmarks.turns_reference import reference


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
    unavailable = next(
        (r.wal_unavailable for rs in costs.values() for r in rs if r.wal_unavailable), ""
    )
    if unavailable:
        print(f"  WAL KB is the whole cluster's and FPI is not measured: {unavailable}")


def print_wal_by_relation(costs: dict[int, list[TurnCost]], kb: str) -> None:
    """Mean WAL bytes per turn by relation, and under each by record type (``Heap/INSERT``,
    ``Heap/LOCK``, ``Btree/INSERT_LEAF``..., and ``full-page images``), over every measured turn
    of each length."""
    for length, runs in sorted(costs.items()):
        turns = [t for r in runs for t in r.wal_by_relation]
        unavailable = next((r.wal_unavailable for r in runs if r.wal_unavailable), "")
        if unavailable:
            print(
                f"\nWAL by relation at {length} turns, knowledge base {kb}: not measured:"
                f" {unavailable}"
            )
            continue
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
    run_stoppable(lambda: asyncio.run(main()))
