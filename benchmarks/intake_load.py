"""What ``benchmarks/intake.py`` measures, phase by phase: the load generator (closed and open
loop PostMessage clients, CompressContext clients racing them), the idle turn latency, the SQL
per PostMessage through the counting proxy, and the audit of every accepted post."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import percentile
from benchmarks.intake_floor import seed_threads
from benchmarks.service import (
    READY_SECONDS,
    Connection,
    WireCounts,
    app_server,
    counting_proxy,
    create_threads,
    endpoint,
    service_env,
    wait_http_ready,
)


# --- the load --------------------------------------------------------------------------------------
@dataclass
class Accepted:
    thread_id: str
    request_id: str
    message_id: str
    content: str


@dataclass
class Phase:
    name: str
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    #: CPU seconds the app's HTTP process used during the phase (all its requests and tasks).
    cpu_seconds: float = float("nan")

    def cpu_share(self) -> float:
        """The HTTP process's CPU use over the phase: near 100% means it was the bottleneck."""
        return self.cpu_seconds / self.seconds * 100 if self.seconds else float("nan")

    @property
    def ok(self) -> int:
        return self.statuses[202]

    def rate(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0

    def p(self, q: float) -> float:
        return percentile(self.latencies, q) * 1000 if self.latencies else float("nan")


class Poster:
    """Posts distinct messages round-robin over the threads and remembers every 202."""

    def __init__(self, threads: list[str], accepted: list[Accepted], tag: str) -> None:
        self.threads = threads
        self.accepted = accepted
        self.tag = tag
        self.counter = 0

    async def post(self, conn: Connection, phase: Phase, started: float) -> None:
        self.counter += 1
        n = self.counter
        tid = self.threads[n % len(self.threads)]
        content = f"{self.tag} message {n}: when does lease {n} expire?"
        try:
            status, body = await conn.request(
                "POST", f"/v1/threads/{tid}/messages", json.dumps({"content": content}).encode()
            )
        except Exception as exc:
            phase.errors[type(exc).__name__] += 1
            return
        phase.latencies.append(time.perf_counter() - started)
        phase.statuses[status] += 1
        if status == 202:
            out = json.loads(body)
            self.accepted.append(Accepted(tid, out["request_id"], out["message_id"], content))


async def closed_loop(base: str, poster: Poster, clients: int, seconds: float) -> Phase:
    phase = Phase(f"closed c={clients}")
    host, port = endpoint(base)
    t0 = time.perf_counter()
    stop = t0 + seconds

    async def client() -> None:
        conn = Connection(host, port)
        try:
            while time.perf_counter() < stop:
                await poster.post(conn, phase, time.perf_counter())
        finally:
            conn.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    phase.seconds = time.perf_counter() - t0
    return phase


async def open_loop(base: str, poster: Poster, clients: int, seconds: float, rate: float) -> Phase:
    """Arrivals at ``rate``/s whatever the answers do; latency counts from the scheduled send
    (a send waiting for a free connection is late, not excused)."""
    phase = Phase(f"open {rate:.0f}/s c={clients}")
    host, port = endpoint(base)
    pool: asyncio.Queue[Connection] = asyncio.Queue()
    for _ in range(clients):
        pool.put_nowait(Connection(host, port))

    async def one(scheduled: float) -> None:
        conn = await pool.get()
        try:
            await poster.post(conn, phase, scheduled)
        finally:
            pool.put_nowait(conn)

    t0 = time.perf_counter()
    tasks: list[asyncio.Task[None]] = []
    i = 0
    while True:
        scheduled = t0 + i / rate
        if scheduled - t0 >= seconds:
            break
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(scheduled)))
        i += 1
    await asyncio.gather(*tasks)
    phase.seconds = time.perf_counter() - t0
    while not pool.empty():
        pool.get_nowait().close()
    return phase


async def compressors(
    base: str, threads: list[str], count: int, stop: asyncio.Event, seed: int
) -> Phase:
    phase = Phase("CompressContext")
    host, port = endpoint(base)

    async def loop(rng: random.Random) -> None:
        conn = Connection(host, port)
        try:
            while not stop.is_set():
                t = time.perf_counter()
                tid = rng.choice(threads)
                try:
                    status, _ = await conn.request("POST", f"/v1/threads/{tid}/context/compress")
                except Exception as exc:
                    phase.errors[type(exc).__name__] += 1
                    continue
                phase.latencies.append(time.perf_counter() - t)
                phase.statuses[status] += 1
                await asyncio.sleep(rng.uniform(0.01, 0.05))
        finally:
            conn.close()

    await asyncio.gather(*(loop(random.Random(seed + i)) for i in range(count)))
    return phase


# --- idle turn latency -----------------------------------------------------------------------------
async def idle_turn_latency(base: str, database_url: str, samples: int) -> list[float]:
    """accepted->started (database clock) of ``samples`` messages, each posted on an idle worker."""
    import psycopg

    from app.db.urls import libpq_url

    host, port = endpoint(base)
    conn = Connection(host, port)
    threads = await create_threads(base, samples)
    out: list[float] = []
    async with await psycopg.AsyncConnection.connect(
        libpq_url(database_url), autocommit=True
    ) as db:
        for tid in threads:
            status, body = await conn.request(
                "POST", f"/v1/threads/{tid}/messages", b'{"content": "when does a lease expire?"}'
            )
            assert status == 202, body
            request_id = json.loads(body)["request_id"]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                row = await (
                    await db.execute(
                        "SELECT extract(epoch FROM r.started_at - m.created_at), r.status::text "
                        "FROM agent_runs r JOIN messages m ON m.request_id = r.request_id "
                        "WHERE r.request_id = %s",
                        (request_id,),
                    )
                ).fetchone()
                if row and row[1] in ("completed", "failed", "cancelled"):
                    out.append(float(row[0]))
                    break
                await asyncio.sleep(0.02)
            else:
                raise SystemExit(f"run for {request_id} did not finish within 60 s")
    conn.close()
    return out


# --- SQL per PostMessage --------------------------------------------------------------------------
async def sql_per_post(
    kind: str, database_url: str, workdir: str, logs: Path, n: int
) -> WireCounts:
    """Statements and round trips per PostMessage after warm-up (prepared statements cached)."""
    async with counting_proxy(database_url) as (proxy, proxied_url):
        env = service_env(proxied_url, workdir, worker=False)
        with contextlib.ExitStack() as stack:
            base = stack.enter_context(app_server(kind, env, logs))
            # The child's shutdown talks through the proxy: stop it off this (the proxy's) loop.
            closer = stack.pop_all()
            await wait_http_ready(
                base, "/health" if kind == "service" else "/", time.monotonic() + READY_SECONDS
            )
            threads = (
                await create_threads(base, 4)
                if kind == "service"
                else await asyncio.to_thread(seed_threads, database_url, 4)
            )
            poster = Poster(threads, [], f"sql-{kind}")
            conn = Connection(*endpoint(base))
            warm = Phase("warm")
            for _ in range(3 * len(threads)):
                await poster.post(conn, warm, time.perf_counter())
            await asyncio.sleep(0.3)  # pool pings and idle chatter settle
            before = WireCounts(
                proxy.counts.statements, proxy.counts.round_trips, Counter(proxy.counts.by_type)
            )
            measured = Phase("measured")
            for _ in range(n):
                await poster.post(conn, measured, time.perf_counter())
            conn.close()
            counts = WireCounts(
                proxy.counts.statements - before.statements,
                proxy.counts.round_trips - before.round_trips,
                proxy.counts.by_type - before.by_type,
            )
            await asyncio.to_thread(closer.close)
            assert measured.ok == n, measured.statuses
            return counts


# --- audit -------------------------------------------------------------------------------------------
def audit(database_url: str, threads: list[str], accepted: list[Accepted]) -> list[str]:
    """Over the load phases' threads: every 202 stored once and intact, nothing else stored."""
    import psycopg

    from app.db.urls import libpq_url

    problems: list[str] = []
    with psycopg.connect(libpq_url(database_url)) as conn:
        users = {
            str(r[0]): (str(r[1]), r[2], str(r[3]))
            for r in conn.execute(
                "SELECT id, conversation_id, content, request_id FROM messages "
                "WHERE role = 'user' AND conversation_id = ANY(%s::uuid[])",
                (threads,),
            ).fetchall()
        }
        requests = {
            str(r[0]): (str(r[1]), r[2])
            for r in conn.execute(
                "SELECT id, conversation_id, payload FROM agent_run_requests "
                "WHERE conversation_id = ANY(%s::uuid[])",
                (threads,),
            ).fetchall()
        }
        dup = conn.execute(
            "SELECT count(*) FROM (SELECT conversation_id, seq FROM messages "
            "GROUP BY 1, 2 HAVING count(*) > 1) d"
        ).fetchone()
    if dup and dup[0]:
        problems.append(f"{dup[0]} duplicated message sequence number(s)")
    for a in accepted:
        msg = users.get(a.message_id)
        if msg != (a.thread_id, a.content, a.request_id):
            problems.append(f"accepted message {a.message_id} missing or altered: {msg}")
        req = requests.get(a.request_id)
        if req is None or req[0] != a.thread_id or req[1].get("message_id") != a.message_id:
            problems.append(f"accepted request {a.request_id} missing or altered")
    if len(users) != len(accepted):
        problems.append(f"{len(users)} user messages stored for {len(accepted)} accepted posts")
    if len(requests) != len(accepted):
        problems.append(f"{len(requests)} requests stored for {len(accepted)} accepted posts")
    return problems
