"""Service and process plumbing the loopback benchmarks share (``intake.py``, ``turns.py``,
``followers.py``): the benchmark's API key and principal, the service's production settings, the
API server child (this file is its entry point: ``--serve-fd`` serves the service or intake's
floor app on an inherited socket) and a separate worker process, a minimal HTTP/1.1 keep-alive
client with thread creation and readiness polling, a counting PostgreSQL wire-protocol proxy, and
readers of a process's CPU time."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import struct
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, child_server

#: Inherited by the server children through the environment.
API_KEY = os.environ.setdefault("TK_INTAKE_BENCH_KEY", "intake-" + uuid.uuid4().hex)
PRINCIPAL = "bench"
#: A cold start imports langchain & co.: slow on a busy machine.
READY_SECONDS = 240.0


# --- the API server child ---------------------------------------------------------------------
def serve(fd: int, kind: str) -> None:
    import uvicorn

    if kind == "floor":
        from benchmarks.intake_floor import floor_app

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
    build_server(
        create_app(settings), settings.http, owns_process=True, fd=fd, timeout_graceful_shutdown=10
    ).run()


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


@contextlib.contextmanager
def worker_process(
    env: dict[str, str], workdir: str, log_file: IO[bytes]
) -> Iterator[subprocess.Popen[bytes]]:
    """A separate ``python -m app worker`` process (as deploy/docker-compose.yml runs it) with
    ``env`` over this process's environment, yielded once it is up; SIGTERM on exit."""
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
        yield worker
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


# --- a counting PostgreSQL wire-protocol proxy ----------------------------------------------------
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


# --- a process's CPU ------------------------------------------------------------------------------
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="the API server child of app_server")
    parser.add_argument("--serve-fd", type=int, required=True)
    parser.add_argument("--app", choices=["service", "floor"], default="service")
    arguments = parser.parse_args()
    serve(arguments.serve_fd, arguments.app)
