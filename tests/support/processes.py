"""Real ``python -m app`` processes (API on a real port, workers) for multi-process tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def app_process(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``python -m app <args>`` with ``env`` on top of ours, output to ``log``."""
    with log.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "app", *args],
            env={**os.environ, **env},
            cwd=ROOT,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


def worker_check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m app worker --check``: the worker's own health check."""
    return subprocess.run(
        [sys.executable, "-m", "app", "worker", "--check"],
        env={**os.environ, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> int | None:
    """The exit code, or None if it is still running after ``timeout`` seconds."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        return await asyncio.to_thread(proc.wait, timeout)
    return None


@contextlib.contextmanager
def reaped(*procs: subprocess.Popen[bytes]) -> Iterator[None]:
    """Whatever happens in the test, no process outlives it."""
    try:
        yield
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)


async def wait_ready(
    base_url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 180
) -> None:
    """Until ``/ready`` answers 200 (a cold interpreter on a busy machine takes a while)."""
    deadline = asyncio.get_running_loop().time() + timeout
    last = "no answer"
    async with httpx.AsyncClient(base_url=base_url) as client:
        while asyncio.get_running_loop().time() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"{base_url} exited with {proc.returncode}: {_tail(log)}")
            with contextlib.suppress(httpx.TransportError):
                resp = await client.get("/ready")
                if resp.status_code == 200:
                    return
                last = resp.text
            await asyncio.sleep(0.2)
    raise AssertionError(f"{base_url} never became ready ({last}): {_tail(log)}")


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else ""
