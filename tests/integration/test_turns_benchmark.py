"""benchmarks/turns.py must keep working: a tiny thread-length run per knowledge-base mode prints
a row per length with every column. Speed is not asserted here (it lives in the benchmark's
output); the turn shape is: with a knowledge base that answers, every turn is ``query_kb`` and
the answer (two model calls) at every length."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from app.db.urls import libpq_url
from tests.support.benchmarks import run_benchmark
from tests.support.processes import ROOT, wait_exit
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_turns_benchmark_thread_length_rows(database_url: str) -> None:
    text = await run_benchmark(
        "turns.py",
        *("--phases", "length", "--lengths", "3,6", "--window", "2", "--repeat", "1"),
        *("--kb", "empty,answers"),
        database_url=database_url,
        timeout=600,
    )
    tables = text.split("thread length (one thread, deploy layout, knowledge base ")[1:]
    assert [t.split(",", 1)[0] for t in tables] == ["empty", "answers"], text
    for table in tables:
        rows = [line.split() for line in table.splitlines() if line.strip()[:1].isdigit()]
        assert [r[0] for r in rows] == ["3", "6"], text
        # turns, latency, CPU, round trips, WAL KB, of it FPI KB, model calls: all measured
        # (CPU is clock-tick coarse and full-page images come with PostgreSQL checkpoints:
        # only >= 0).
        for r in rows:
            assert float(r[1]) > 0 and float(r[2]) >= 0 and int(r[3]) > 0, text
            assert float(r[4]) > 0 and 0 <= float(r[5]) <= float(r[4]), text
            assert int(r[6]) >= 2, text
    answering = [line.split() for line in tables[1].splitlines() if line.strip()[:1].isdigit()]
    assert [r[6] for r in answering] == ["2", "2"], text


def _has_pg_walinspect(database_url: str) -> bool:
    with psycopg.connect(libpq_url(database_url)) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_walinspect'"
        ).fetchone()
    return bool(row and row[0])


@pytest.mark.extensions
async def test_turns_benchmark_wal_by_relation(database_url: str) -> None:
    """``--wal-by-relation``: per length, the relations the turns wrote (the checkpoint tables
    among them), each with its record types, and a total. On a server without ``pg_walinspect``
    (the embedded PostgreSQL: tests/integration/test_embedded_database.py runs this test there),
    the output says that it is not measured and why, instead of an empty table."""
    text = await run_benchmark(
        "turns.py",
        *("--phases", "length", "--lengths", "3", "--window", "2", "--repeat", "1"),
        *("--kb", "answers", "--wal-by-relation"),
        database_url=database_url,
        timeout=600,
    )
    heading = "WAL by relation at 3 turns, knowledge base answers"
    if not _has_pg_walinspect(database_url):
        assert f"{heading}: not measured: this server (PostgreSQL " in text, text
        assert "has no pg_walinspect extension" in text, text
        assert "WAL KB is the whole cluster's and FPI is not measured" in text, text
        return
    block = text.split(heading)[1]
    lines = [line for line in block.splitlines()[1:] if line.strip()]
    relations = {
        line.rsplit(None, 1)[0].strip(): float(line.rsplit(None, 1)[1])
        for line in lines
        if line[2] != " "  # record types are indented further
    }
    assert relations.get("checkpoints", 0) > 0 and relations.get("checkpoint_blobs", 0) > 0, text
    assert relations.get("messages", 0) > 0, text
    # The total is the relations' sum; each printed figure is rounded to the byte.
    parts = [v for k, v in relations.items() if k != "total"]
    assert abs(relations["total"] - sum(parts)) <= 0.5 * len(parts), text
    assert any(line.split()[0] == "Heap/INSERT" for line in lines if line.startswith("      "))


def _children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid and fields[0] != "Z":
                    found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    with contextlib.suppress(OSError, IndexError):
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False


def _start(script: str, args: list[str], database_url: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DATABASE_URL": database_url}
    env.pop("TEST_DATABASE_URL", None)
    return subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


async def test_sigterm_stops_the_benchmark_and_the_servers_it_started(database_url: str) -> None:
    """Issue 30: SIGTERM ended the benchmark at once and left what it started running (the
    LangGraph reference, in a session of its own, and the Threadkeeper server children). Now
    SIGTERM stops it as Ctrl-C does: every server it started is stopped with it."""
    args = ["--phases", "capacity", "--layouts", "deploy", "--threads", "1", "--seconds", "600"]
    proc = _start("turns.py", [*args, "--repeat", "1"], database_url)
    children: list[int] = []
    try:

        async def serving() -> bool:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            children[:] = _children(proc.pid)
            return len(children) >= 2  # the API server and the separate worker

        await wait_until(serving, "the benchmark's API server and worker", timeout=300)
        proc.send_signal(signal.SIGTERM)
        code = await wait_exit(proc, 120)
        assert code == 130, code
        assert proc.stderr is not None and b"stopped" in proc.stderr.read()
        assert [pid for pid in children if _alive(pid)] == []
    finally:
        for pid in [proc.pid, *children]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.wait(10)
