"""Pieces the loopback benchmarks share: a throwaway database, a server child on an inherited
socket, readiness, and nearest-rank percentiles."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TypeVar

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]
#: The tests' OpenAI-protocol stub, served apart with ``child_server`` (its ``--serve-fd`` main).
OPENAI_STUB = ROOT / "tests" / "support" / "openai_server.py"
DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


def run_stoppable(entry: Callable[[], T]) -> T:
    """``entry()``, stopped by SIGTERM (``kill``, an orchestrator, a CI timeout) as by Ctrl-C:
    the ``finally`` of every context manager runs, so the servers it started stop with it. Why:
    SIGTERM's default action ends the process at once, and its children run on, orphaned (the
    LangGraph reference even in a session of its own, which no Ctrl-C reaches either)."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return entry()
    except KeyboardInterrupt:
        print("stopped; the servers it started were stopped too", file=sys.stderr)
        raise SystemExit(130) from None


def server_from_env() -> str:
    return os.environ.get("DATABASE_URL") or os.environ.get("TEST_DATABASE_URL") or DEFAULT_SERVER


@contextlib.contextmanager
def fresh_database(server: str, prefix: str = "tk_bench") -> Iterator[str]:
    """A new, migrated database on ``server``; dropped (forcefully) on exit."""
    import psycopg
    from sqlalchemy.engine import make_url

    from app.db.migrate import upgrade_head

    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = make_url(server).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_url(server).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade_head(url)
        yield url
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def child_server(
    script: str, args: list[str], env: dict[str, str], stderr: IO[bytes] | None = None
) -> Iterator[str]:
    """Run ``script --serve-fd <fd> *args`` in a child process serving on a socket bound here
    (ephemeral port, no race); yield its base URL; SIGINT it (graceful) on exit."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    sock.set_inheritable(True)
    port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, script, "--serve-fd", str(sock.fileno()), *args],
        env={**os.environ, **env},
        cwd=ROOT,
        pass_fds=[sock.fileno()],
        stderr=stderr,
    )
    sock.close()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


async def wait_ready(client: object, deadline: float, path: str = "/ready") -> None:
    """Poll ``path`` with an httpx client until it answers 200 (bounded by ``deadline``)."""
    import asyncio

    import httpx

    assert isinstance(client, httpx.AsyncClient)
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):
            if (await client.get(path)).status_code == 200:
                return
        await asyncio.sleep(0.1)
    raise SystemExit("the server did not become ready in time")


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (no interpolation: every figure is a measured request)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p * len(ordered)) - 1)]


def print_side_by_side(figures: dict[str, list[float]], what: str, ratio: str) -> None:
    """Two variants measured round by round: each one's median ``what`` with its rounds, then
    the ratio of the second's median to the first's, printed as ``ratio <ratio>: <value>``."""
    medians = {name: statistics.median(values) for name, values in figures.items()}
    digits = 3 if min(medians.values()) < 1 else 2
    for name, values in figures.items():
        shown = " ".join(f"{v:.{digits}f}" for v in values)
        print(f"{name:24} {what} median {medians[name]:.{digits}f}  (rounds: {shown})")
    base, new = list(medians)
    print(f"ratio {ratio}: {medians[new] / medians[base]:.2f}")
