"""Loopback load benchmark: N threads x M messages plus concurrent compress attempts, then an audit.

Run: ``.venv/bin/python benchmarks/load.py`` (defaults: 8 threads x 5 messages, about 10-20 s).

What it does, end to end and bounded in count and time:

1. creates a fresh database on the PostgreSQL server named by ``DATABASE_URL`` /
   ``TEST_DATABASE_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``), migrates it,
   and drops it at the end;
2. starts the real app (``uvicorn``, in-process worker, offline extractive model) in a child
   process on 127.0.0.1 with an ephemeral port (the parent binds the socket and hands it over);
3. seeds a small knowledge base, then, concurrently: every thread posts its M messages while
   compressors keep trying ``CompressContext`` on random threads (most get 409 thread_busy while
   runs are queued or running: that is the contract) and the client polls ``ListRuns``;
4. waits (bounded by ``--deadline``) until every request reached a terminal run, compresses every
   idle thread once more (no 409 is allowed then), and audits: every posted message stored exactly
   once, one terminal run per request, no request left queued, no duplicated message (API and SQL);
5. prints requests/s, p50/p99 latency per operation, status counts (409s), run latency and the
   audit; exits 0 only if the audit passes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (
    child_server,
    fresh_database,
    percentile,
    run_stoppable,
    server_from_env,
    wait_ready,
)

API_KEY = "load-" + uuid.uuid4().hex
AUTH = {"Authorization": f"Bearer {API_KEY}"}
TERMINAL = {"completed", "failed", "cancelled"}

DOC = "\n\n".join(
    f"Section {i}. A run holds a lease renewed by a heartbeat; when lease {i} expires the run is "
    f"failed and the thread becomes idle again. Manual compression of thread {i} is refused with "
    "thread_busy while a run is queued, running or interrupted. " * 3
    for i in range(30)
)


# --- the server child ---------------------------------------------------------------------------
def serve(fd: int) -> None:
    import uvicorn

    from app.config import load_settings
    from app.main import create_app

    app = create_app(load_settings())
    uvicorn.run(app, fd=fd, log_config=None, access_log=False, timeout_graceful_shutdown=10)


def server_process(database_url: str, workdir: str) -> contextlib.AbstractContextManager[str]:
    env = {
        "DATABASE_URL": database_url,
        "THREADKEEPER_API_KEYS": f"load:{API_KEY}",
        "THREADKEEPER_WORKDIR_ROOT": workdir,
        "THREADKEEPER_LOG_LEVEL": "WARNING",
        "THREADKEEPER_WORKER_POLL_SECONDS": "0.05",
        "THREADKEEPER_LLM_BASE_URL": "",
        "THREADKEEPER_DB_POOL_SIZE": "10",
        "THREADKEEPER_CHECKPOINTER_POOL_SIZE": "10",
        # Low enough that threads accumulate something to compress within M turns.
        "THREADKEEPER_SUMMARY_THRESHOLD": "6000",
        "THREADKEEPER_TOOL_RESULT_PREVIEW_TOKENS": "300",
        "THREADKEEPER_SUMMARY_KEEP_RECENT_TOKENS": "600",
        # One principal drives the whole load: measure the server, not the per-principal limit.
        "THREADKEEPER_RATE_LIMIT_PER_SECOND": "0",
    }
    return child_server(__file__, [], env)


# --- measurement ----------------------------------------------------------------------------------
@dataclass
class Stats:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    statuses: dict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    errors: Counter[str] = field(default_factory=Counter)

    def record(self, op: str, seconds: float, status: int) -> None:
        self.latencies[op].append(seconds)
        self.statuses[op][status] += 1

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.latencies.values())


class Api:
    def __init__(self, client: Any, stats: Stats) -> None:
        self.client = client
        self.stats = stats

    async def call(self, op: str, method: str, url: str, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            resp = await self.client.request(method, url, headers=AUTH, **kwargs)
        except Exception as exc:
            self.stats.errors[f"{op}: {type(exc).__name__}"] += 1
            raise
        self.stats.record(op, time.perf_counter() - start, resp.status_code)
        return resp


# --- the load ---------------------------------------------------------------------------------------
@dataclass
class Posted:
    thread_id: str
    request_id: str
    message_id: str
    content: str
    accepted_at: datetime


async def thread_worker(api: Api, index: int, messages: int, posted: list[Posted]) -> str:
    resp = await api.call("CreateThread", "POST", "/v1/threads", json={"title": f"load-{index}"})
    assert resp.status_code == 201, resp.text
    tid = resp.json()["id"]
    for j in range(messages):
        content = f"thread {index} message {j}: when does lease {index * 10 + j} expire?"
        r = await api.call(
            "PostMessage", "POST", f"/v1/threads/{tid}/messages", json={"content": content}
        )
        if r.status_code != 202:
            raise RuntimeError(f"PostMessage answered {r.status_code}: {r.text}")
        body = r.json()
        accepted = datetime.now(UTC)
        posted.append(Posted(tid, body["request_id"], body["message_id"], content, accepted))
        await asyncio.sleep(random.uniform(0, 0.05))
    return str(tid)


async def compressor(
    api: Api,
    thread_ids: list[str],
    ready: asyncio.Event,
    stop: asyncio.Event,
    attempts: int,
    rng: random.Random,
) -> None:
    """CompressContext on random threads until every run ended (at most ``attempts`` times):
    409 while a thread has queued or running input, 200/422 once it is idle."""
    await ready.wait()
    for _ in range(attempts):
        if stop.is_set():
            return
        tid = rng.choice(thread_ids)
        await api.call("CompressContext", "POST", f"/v1/threads/{tid}/context/compress")
        await asyncio.sleep(rng.uniform(0.02, 0.1))


async def wait_terminal(
    api: Api, thread_ids: list[str], messages: int, deadline: float
) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {}
    pending = set(thread_ids)
    while pending and time.monotonic() < deadline:
        for tid in list(pending):
            r = await api.call("ListRuns", "GET", f"/v1/threads/{tid}/runs", params={"limit": 200})
            items = r.json()["items"]
            runs[tid] = items
            if len(items) == messages and all(i["status"] in TERMINAL for i in items):
                pending.discard(tid)
        if pending:
            await asyncio.sleep(0.1)
    return runs


async def audit(
    api: Api,
    database_url: str,
    thread_ids: list[str],
    posted: list[Posted],
    runs: dict[str, list[dict[str, Any]]],
) -> list[str]:
    problems: list[str] = []
    by_thread: dict[str, list[Posted]] = defaultdict(list)
    for p in posted:
        by_thread[p.thread_id].append(p)
    for tid in thread_ids:
        resp = await api.call(
            "ListMessages", "GET", f"/v1/threads/{tid}/messages", params={"limit": 1000}
        )
        history = resp.json()["items"]
        ids = [m["id"] for m in history]
        seqs = [m["seq"] for m in history]
        if len(set(ids)) != len(ids) or len(set(seqs)) != len(seqs) or seqs != sorted(seqs):
            problems.append(f"{tid}: duplicated or unordered messages")
        users = [m for m in history if m["role"] == "user"]
        expected = {p.message_id: p.content for p in by_thread[tid]}
        stored = Counter(m["id"] for m in users)
        for mid, content in expected.items():
            if stored[mid] != 1:
                problems.append(f"{tid}: message {mid} stored {stored[mid]} times")
            elif next(m["content"] for m in users if m["id"] == mid) != content:
                problems.append(f"{tid}: message {mid} content changed")
        if set(stored) - set(expected):
            problems.append(f"{tid}: unexpected user messages {set(stored) - set(expected)}")
        thread_runs = runs.get(tid, [])
        per_request = Counter(r["request_id"] for r in thread_runs)
        for p in by_thread[tid]:
            if per_request[p.request_id] != 1:
                problems.append(
                    f"{tid}: request {p.request_id} has {per_request[p.request_id]} runs"
                )
        for r in thread_runs:
            if r["status"] not in TERMINAL:
                problems.append(f"{tid}: run {r['id']} still {r['status']}")
            answered = [m for m in history if m["run_id"] == r["id"] and m["role"] == "assistant"]
            if r["status"] == "completed" and not answered:
                problems.append(f"{tid}: completed run {r['id']} has no assistant message")
    problems += sql_audit(database_url, len(posted))
    return problems


def sql_audit(database_url: str, posted: int) -> list[str]:
    """The same promises checked in SQL, independent of the API's own reads."""
    import psycopg

    from app.db.urls import libpq_url

    problems: list[str] = []
    with psycopg.connect(libpq_url(database_url)) as conn:
        statuses: dict[str, int] = dict(
            conn.execute(  # type: ignore[arg-type]
                "SELECT status::text, count(*) FROM agent_run_requests GROUP BY status"
            ).fetchall()
        )
        if statuses.get("queued"):
            problems.append(f"{statuses['queued']} request(s) still queued")
        if sum(statuses.values()) != posted:
            problems.append(f"{sum(statuses.values())} requests stored for {posted} posts")
        row = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM messages WHERE lc_id IS NOT NULL "
            "GROUP BY conversation_id, lc_id HAVING count(*) > 1) d"
        ).fetchone()
        if row and row[0]:
            problems.append(f"{row[0]} duplicated message id(s) in SQL")
        row = conn.execute(
            "SELECT count(*) FROM agent_run_requests q WHERE (SELECT count(*) FROM agent_runs r "
            "WHERE r.request_id = q.id) <> 1"
        ).fetchone()
        if row and row[0]:
            problems.append(f"{row[0]} request(s) without exactly one run in SQL")
    return problems


def run_latencies(
    runs: dict[str, list[dict[str, Any]]], posted: list[Posted]
) -> tuple[list[float], list[float]]:
    """(accepted -> finished, started -> finished) seconds of every finished run (same host
    clock for client and server)."""
    accepted = {p.request_id: p.accepted_at for p in posted}
    total: list[float] = []
    active: list[float] = []
    for items in runs.values():
        for r in items:
            if r.get("finished_at") and r.get("started_at") and r["request_id"] in accepted:
                started = datetime.fromisoformat(r["started_at"])
                finished = datetime.fromisoformat(r["finished_at"])
                total.append((finished - accepted[r["request_id"]]).total_seconds())
                active.append((finished - started).total_seconds())
    return total, active


def main(args: argparse.Namespace) -> int:
    server = server_from_env()
    workdir = tempfile.mkdtemp(prefix="tk-load-")
    started = time.monotonic()
    try:
        with fresh_database(server, "tk_load") as db, server_process(db, workdir) as base_url:
            return asyncio.run(load(args, db, base_url, started + args.deadline))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        print(f"\ntotal wall time {time.monotonic() - started:.1f} s (database dropped)")


async def load(args: argparse.Namespace, db: str, base_url: str, deadline: float) -> int:
    import httpx

    rng = random.Random(args.seed)
    random.seed(args.seed)
    stats = Stats()
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=base_url, timeout=60, limits=limits) as client:
        await wait_ready(client, deadline)
        api = Api(client, stats)
        doc = await api.call(
            "AddDocument",
            "POST",
            "/v1/knowledge-bases/default/documents",
            json={"title": "Leases", "content": DOC, "chunk_chars": 800},
        )
        assert doc.status_code == 201, doc.text

        posted: list[Posted] = []
        thread_ids: list[str] = []
        ready = asyncio.Event()
        stop = asyncio.Event()
        t0 = time.perf_counter()

        async def one_thread(i: int) -> None:
            tid = await thread_worker(api, i, args.messages, posted)
            thread_ids.append(tid)

        compressors = [
            asyncio.create_task(
                compressor(
                    api,
                    thread_ids,
                    ready,
                    stop,
                    args.compress_attempts,
                    random.Random(rng.random()),
                )
            )
            for _ in range(args.compressors)
        ]
        threads = [asyncio.create_task(one_thread(i)) for i in range(args.threads)]
        while not thread_ids and not all(t.done() for t in threads):
            await asyncio.wait(threads, return_when=asyncio.FIRST_COMPLETED, timeout=0.05)
        ready.set()
        await asyncio.gather(*threads)
        runs = await wait_terminal(api, thread_ids, args.messages, deadline)
        stop.set()
        await asyncio.gather(*compressors)
        load_seconds = time.perf_counter() - t0
        load_requests = stats.total

        # Idle now: every compress must be 200 or 422, never 409.
        for tid in thread_ids:
            r = await api.call(
                "CompressContext(idle)", "POST", f"/v1/threads/{tid}/context/compress"
            )
            if r.status_code not in (200, 422):
                stats.errors[f"idle compress answered {r.status_code}"] += 1
        problems = await audit(api, db, thread_ids, posted, runs)
        report(args, stats, load_seconds, load_requests, posted, runs, problems)
        return 0 if not problems and not stats.errors else 1


def report(
    args: argparse.Namespace,
    stats: Stats,
    load_seconds: float,
    load_requests: int,
    posted: list[Posted],
    runs: dict[str, list[dict[str, Any]]],
    problems: list[str],
) -> None:
    print(
        f"\nThreadkeeper loopback load: {args.threads} threads x {args.messages} messages, "
        f"{args.compressors} compressors (<= {args.compress_attempts} attempts each, seed "
        f"{args.seed}), "
        f"offline extractive model, 1 uvicorn process with the in-process worker"
    )
    print(
        f"load phase: {load_requests} requests in {load_seconds:.2f} s = "
        f"{load_requests / load_seconds:.1f} requests/s"
    )
    print(f"\n{'operation':<24}{'count':>7}{'p50 ms':>10}{'p99 ms':>10}  statuses")
    for op in sorted(stats.latencies):
        values = stats.latencies[op]
        codes = " ".join(f"{c}:{n}" for c, n in sorted(stats.statuses[op].items()))
        print(
            f"{op:<24}{len(values):>7}{percentile(values, 0.5) * 1000:>10.1f}"
            f"{percentile(values, 0.99) * 1000:>10.1f}  {codes}"
        )
    conflicts = sum(c[409] for c in stats.statuses.values())
    print(
        f"\n409 thread_busy answers: {conflicts} (CompressContext during load: "
        f"{stats.statuses['CompressContext'][409]} of "
        f"{sum(stats.statuses['CompressContext'].values())})"
    )
    total, active = run_latencies(runs, posted)
    statuses = Counter(r["status"] for items in runs.values() for r in items)
    print(f"runs: {dict(statuses)}")
    if total:
        print(
            f"turn latency accepted->finished p50 {percentile(total, 0.5) * 1000:.0f} ms, "
            f"p99 {percentile(total, 0.99) * 1000:.0f} ms; "
            f"started->finished p50 {percentile(active, 0.5) * 1000:.0f} ms, "
            f"p99 {percentile(active, 0.99) * 1000:.0f} ms"
        )
    if stats.errors:
        print(f"client errors: {dict(stats.errors)}")
    expected = args.threads * args.messages
    print(
        f"\nAUDIT: {len(posted)}/{expected} messages posted; "
        + (
            "PASS - no message lost or duplicated, every request reached a terminal run"
            if not problems and len(posted) == expected
            else "FAIL"
        )
    )
    for p in problems[:50]:
        print(f"  - {p}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--messages", type=int, default=5, help="messages per thread")
    parser.add_argument("--compressors", type=int, default=4, help="concurrent compress loops")
    parser.add_argument(
        "--compress-attempts", type=int, default=50, help="upper bound per compressor"
    )
    parser.add_argument("--deadline", type=float, default=180.0, help="seconds, hard bound")
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--serve-fd", type=int, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.serve_fd is not None:
        serve(arguments.serve_fd)
    else:
        sys.exit(run_stoppable(lambda: main(arguments)))
