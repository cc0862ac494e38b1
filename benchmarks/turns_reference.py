"""The LangGraph reference of ``benchmarks/turns.py``: ``langgraph dev`` (``langgraph-api``,
in-memory runtime, installed once into ``.venv-lgref`` from the ``langgraph-reference`` extra)
serving the same graph shape (``benchmarks/langgraph_reference``), driven by the same closed loop
as Threadkeeper's capacity phase; the CPU of its process tree."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT
from benchmarks.service import READY_SECONDS
from benchmarks.turns_driver import Capacity, closed_loop

REFERENCE_DIR = ROOT / "benchmarks" / "langgraph_reference"
REFERENCE_VENV = ROOT / ".venv-lgref"


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


async def reference_ready(client: Any, proc: subprocess.Popen[bytes]) -> bool:
    """Wait until ``langgraph dev`` answers (False, said on stderr, if it never does)."""
    deadline = time.monotonic() + READY_SECONDS
    while True:
        try:
            await client.assistants.search(limit=1)
            return True
        except Exception:
            if time.monotonic() > deadline or proc.poll() is not None:
                print("langgraph reference: the server did not start", file=sys.stderr)
                return False
            await asyncio.sleep(0.3)


async def reference(thread_counts: list[int], seconds: float, logs: Path) -> dict[int, Capacity]:
    from langgraph_sdk import get_client

    langgraph = reference_venv()
    if langgraph is None:
        return {}
    out: dict[int, Capacity] = {}
    with reference_server(langgraph, logs) as (base, proc):
        client = get_client(url=base, api_key=None)
        if not await reference_ready(client, proc):
            return {}
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
