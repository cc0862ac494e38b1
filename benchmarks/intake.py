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
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
from litestar import Litestar, Request, Response, post

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (
    ROOT,
    child_server,
    fresh_database,
    percentile,
    server_from_env,
)

#: Inherited by the server children through the environment.
API_KEY = os.environ.setdefault("TK_INTAKE_BENCH_KEY", "intake-" + uuid.uuid4().hex)
PRINCIPAL = "bench"
FLOOR_LOCK_TIMEOUT_MS = 5000
#: A cold start imports langchain & co.: slow on a busy machine.
READY_SECONDS = 240.0


# --- the floor app (child process) ------------------------------------------------------------
class FloorBody(msgspec.Struct):
    content: str


@post("/v1/threads/{thread_id:uuid}/messages", status_code=202)
async def floor_post_message(
    thread_id: uuid.UUID, data: FloorBody, request: Request[Any, Any, Any]
) -> Response[Any]:
    """The least an HTTP app can do for PostMessage: the same rows and row lock, no framework
    features beyond routing and msgspec decoding."""
    if request.headers.get("authorization") != f"Bearer {API_KEY}":
        return Response({"error": "unauthorized"}, status_code=401)
    pool: asyncpg.Pool = request.app.state.pool
    message_id, request_id = uuid.uuid4(), uuid.uuid4()
    lc_id = f"user-{uuid.uuid4()}"
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(f"SET LOCAL lock_timeout = {FLOOR_LOCK_TIMEOUT_MS}")
        row = await conn.fetchrow(
            "SELECT id FROM conversations WHERE id = $1 AND owner_id = $2 FOR UPDATE",
            thread_id,
            PRINCIPAL,
        )
        if row is None:
            return Response({"error": "not_found"}, status_code=404)
        seqs = await conn.fetchrow(
            "UPDATE conversations SET next_message_seq = next_message_seq + 1, "
            "next_request_seq = next_request_seq + 1, updated_at = now() WHERE id = $1 "
            "RETURNING next_message_seq - 1 AS m, next_request_seq - 1 AS r",
            thread_id,
        )
        await conn.execute(
            "INSERT INTO messages (id, conversation_id, seq, role, content, lc_id, request_id)"
            " VALUES ($1, $2, $3, 'user', $4, $5, $6)",
            message_id,
            thread_id,
            seqs["m"],
            data.content,
            lc_id,
            request_id,
        )
        await conn.execute(
            "INSERT INTO agent_run_requests (id, conversation_id, seq, payload, status) "
            "VALUES ($1, $2, $3, $4::jsonb, 'queued')",
            request_id,
            thread_id,
            seqs["r"],
            json.dumps({"content": data.content, "message_id": str(message_id), "lc_id": lc_id}),
        )
    return Response(
        {"request_id": str(request_id), "message_id": str(message_id), "status": "queued"},
        status_code=202,
    )


def floor_app(database_url: str) -> Litestar:
    from app.db.urls import libpq_url

    async def startup(app: Litestar) -> None:
        app.state.pool = await asyncpg.create_pool(
            libpq_url(database_url), min_size=10, max_size=10
        )

    async def shutdown(app: Litestar) -> None:
        await app.state.pool.close()

    return Litestar([floor_post_message], on_startup=[startup], on_shutdown=[shutdown])


def serve(fd: int, kind: str) -> None:
    import uvicorn

    if kind == "floor":
        app = floor_app(os.environ["DATABASE_URL"])
        # uvicorn's defaults (uvloop + httptools when installed).
        uvicorn.run(app, fd=fd, log_config=None, access_log=False, timeout_graceful_shutdown=10)
        return
    from app.config import load_settings
    from app.http_server import build_server
    from app.main import create_app

    settings = load_settings()
    # Exactly what `python -m app serve` runs (its HTTP protocol, timeouts, streams ended at
    # shutdown), on the given socket.
    build_server(create_app(settings), settings.http, fd=fd, timeout_graceful_shutdown=10).run()


def service_env(database_url: str, workdir: str, *, worker: bool = False) -> dict[str, str]:
    """Production settings; only what the benchmark must own is set."""
    return {
        "DATABASE_URL": database_url,
        "THREADKEEPER_API_KEYS": f"{PRINCIPAL}:{API_KEY}",
        "THREADKEEPER_WORKDIR_ROOT": workdir,
        "THREADKEEPER_LLM_BASE_URL": "",
        "THREADKEEPER_WORKER_IN_PROCESS": "true" if worker else "false",
        # The per-principal rate limit (50/s by default) would measure itself, not intake.
        "THREADKEEPER_RATE_LIMIT_PER_SECOND": "0",
        # Production logging (JSON, INFO) goes to a file, as it would to a log shipper.
        "THREADKEEPER_LOG_LEVEL": "INFO",
        "THREADKEEPER_LOG_JSON": "true",
    }


@contextlib.contextmanager
def app_server(kind: str, env: dict[str, str], log_path: Path) -> Iterator[str]:
    with (
        log_path.open("ab") as log_file,
        child_server(__file__, ["--app", kind], env, stderr=log_file) as base,
    ):
        yield base


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
        beat = Path(workdir) / "worker.heartbeat"
        beat.unlink(missing_ok=True)
        worker = subprocess.Popen(
            [sys.executable, "-m", "app", "worker"],
            env={**os.environ, **env, "THREADKEEPER_WORKER_HEARTBEAT_FILE": str(beat)},
            cwd=ROOT,
            stderr=log_file,
        )
        try:
            deadline = time.monotonic() + READY_SECONDS
            while not beat.exists():  # the claim loop went round: the worker is up
                if worker.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the worker process did not start")
                time.sleep(0.1)
            yield base
        finally:
            worker.send_signal(signal.SIGTERM)  # graceful drain, as the orchestrator would
            try:
                worker.wait(60)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(10)


# --- a minimal HTTP/1.1 keep-alive client (the load generator must stay cheap) -----------------
class Connection:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, path: str, body: bytes = b"", auth: bool = True
    ) -> tuple[int, bytes]:
        for attempt in range(2):
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            assert self.reader is not None
            head = (
                f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n"
                + (f"Authorization: Bearer {API_KEY}\r\n" if auth else "")
                + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            try:
                self.writer.write(head.encode() + body)
                raw = await self.reader.readuntil(b"\r\n\r\n")
            except (ConnectionError, asyncio.IncompleteReadError):
                self.close()
                if attempt:
                    raise
                continue
            lines = raw.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 2)[1])
            headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
            payload = await self.reader.readexactly(int(headers.get("content-length", "0")))
            if headers.get("connection", "").lower() == "close":
                self.close()
            return status, payload
        raise ConnectionError("unreachable")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def endpoint(base_url: str) -> tuple[str, int]:
    host, _, port = base_url.removeprefix("http://").partition(":")
    return host, int(port)


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


async def create_threads(base: str, count: int) -> list[str]:
    host, port = endpoint(base)
    conn = Connection(host, port)
    out: list[str] = []
    for i in range(count):
        status, body = await conn.request(
            "POST", "/v1/threads", json.dumps({"title": f"intake-{i}"}).encode()
        )
        assert status == 201, body
        out.append(json.loads(body)["id"])
    conn.close()
    return out


def seed_threads(database_url: str, count: int) -> list[str]:
    """The floor has no CreateThread: the same rows, inserted directly."""
    import psycopg

    from app.db.urls import libpq_url

    ids = [str(uuid.uuid4()) for _ in range(count)]
    with psycopg.connect(libpq_url(database_url)) as conn, conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO conversations (id, owner_id, agent_id, title) VALUES (%s, %s, 'default', '')",
            [(i, PRINCIPAL) for i in ids],
        )
    return ids


async def wait_http_ready(base: str, path: str, deadline: float) -> None:
    host, port = endpoint(base)
    while time.monotonic() < deadline:
        conn = Connection(host, port)
        try:
            status, _ = await conn.request("GET", path, auth=False)
            if status in (200, 404, 405):
                return
        except OSError:
            pass
        finally:
            conn.close()
        await asyncio.sleep(0.1)
    raise SystemExit(f"{base} did not become ready in time")


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


# --- SQL per PostMessage: a counting PostgreSQL wire-protocol proxy -------------------------------
@dataclass
class WireCounts:
    statements: int = 0
    round_trips: int = 0
    by_type: Counter[str] = field(default_factory=Counter)


class CountingProxy:
    """Forwards PostgreSQL connections and counts what clients send: Execute ('E') and simple
    Query ('Q') are statements; Sync ('S') and 'Q' end a round trip. Declines TLS so the
    stream stays readable."""

    def __init__(self, host: str, port: int) -> None:
        """``host`` is a name or, for a Unix-socket server, its socket directory."""
        self.host, self.port = host, port
        self.counts = WireCounts()
        self.server: asyncio.Server | None = None

    async def _open_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.host.startswith("/"):
            return await asyncio.open_unix_connection(f"{self.host}/.s.PGSQL.{self.port}")
        return await asyncio.open_connection(self.host, self.port)

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await self._open_upstream()
        try:
            while True:  # untyped startup packets; refuse SSL / GSS encryption requests
                length = struct.unpack("!I", await reader.readexactly(4))[0]
                packet = await reader.readexactly(length - 4)
                code = struct.unpack("!I", packet[:4])[0]
                if code in (80877103, 80877104):
                    writer.write(b"N")
                    continue
                up_writer.write(struct.pack("!I", length) + packet)
                break

            async def downstream() -> None:
                while data := await up_reader.read(65536):
                    writer.write(data)
                    await writer.drain()
                writer.close()

            pump = asyncio.create_task(downstream())
            try:
                while True:
                    kind = await reader.readexactly(1)
                    length = struct.unpack("!I", await reader.readexactly(4))[0]
                    body = await reader.readexactly(length - 4)
                    tag = kind.decode()
                    self.counts.by_type[tag] += 1
                    if tag in ("E", "Q"):
                        self.counts.statements += 1
                    if tag in ("S", "Q"):
                        self.counts.round_trips += 1
                    up_writer.write(kind + struct.pack("!I", length) + body)
                    await up_writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                pump.cancel()
        finally:
            up_writer.close()
            writer.close()


@contextlib.asynccontextmanager
async def counting_proxy(database_url: str) -> AsyncIterator[tuple[CountingProxy, str]]:
    from sqlalchemy.engine import make_url

    url = make_url(database_url)
    socket_dir = url.query.get("host")
    host = url.host or (socket_dir if isinstance(socket_dir, str) else None) or "127.0.0.1"
    proxy = CountingProxy(host, url.port or 5432)
    port = await proxy.start()
    url = url.difference_update_query(["host"])
    try:
        yield proxy, url.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
    finally:
        await proxy.stop()


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


# --- the HTTP process's CPU ------------------------------------------------------------------------
def server_pid(base: str) -> int:
    """The child process listening on ``base``'s port (its socket inode in /proc/net/tcp)."""
    port = endpoint(base)[1]
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # LISTEN
            inodes.add(fields[9])
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(proc.name)
    raise SystemExit(f"no process listens on {base}")


def process_cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of ``pid`` so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    parser.add_argument("--serve-fd", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--app", choices=["service", "floor"], help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.serve_fd is not None:
        serve(arguments.serve_fd, arguments.app or "service")
    else:
        sys.exit(main(arguments))
