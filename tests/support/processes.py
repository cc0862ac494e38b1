"""Real ``python -m app`` processes (API on a real port, workers) for multi-process tests."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path

import httpx

from tests.support.app_harness import API_KEY
from tests.support.openai_server import OpenAICompatibleServer

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def process_env(env: Mapping[str, str], *, inherit_settings: bool = True) -> dict[str, str]:
    """Our environment with ``env`` on top. ``inherit_settings=False`` drops every inherited
    ``THREADKEEPER_*`` variable, so only ``env`` configures the app (and names unknown ones)."""
    base = {
        k: v for k, v in os.environ.items() if inherit_settings or not k.startswith("THREADKEEPER_")
    }
    return {**base, **env}


def app_process(
    args: list[str],
    env: Mapping[str, str],
    log: Path | None,
    *,
    inherit_settings: bool = True,
    shell_prefix: str | None = None,
) -> subprocess.Popen[bytes]:
    """``python -m app <args>`` with ``env`` on top of ours, stdout and stderr to ``log``.

    ``log=None``: stdout discarded, stderr on a pipe (``proc.communicate()``), for a process
    whose own file writes are limited. ``shell_prefix``: sh commands run first in the same
    process (e.g. ``ulimit -f 1``)."""
    argv = [sys.executable, "-m", "app", *args]
    if shell_prefix is not None:
        argv = ["sh", "-c", f'{shell_prefix}; exec "$0" "$@"', *argv]
    popen = functools.partial(
        subprocess.Popen,
        argv,
        env=process_env(env, inherit_settings=inherit_settings),
        cwd=ROOT,
    )
    if log is None:
        return popen(stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with log.open("ab") as sink:
        return popen(stdout=sink, stderr=subprocess.STDOUT)


def app_run(
    args: list[str], env: Mapping[str, str], *, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m app <args>`` to its end with exactly ``env`` (nothing of ours), output captured."""
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        env=dict(env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def worker_check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m app worker --check``: the worker's own health check."""
    return subprocess.run(
        [sys.executable, "-m", "app", "worker", "--check"],
        env=process_env(env),
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


async def stop(proc: subprocess.Popen[bytes], timeout: float = 30) -> int | None:
    """Ctrl-C (SIGINT, a graceful shutdown), then SIGKILL if it is still running after ``timeout``."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    code = await wait_exit(proc, timeout)
    if code is None:
        proc.kill()
        proc.wait(10)
    return code


@contextlib.asynccontextmanager
async def served(
    env: Mapping[str, str], log: Path, *, inherit_settings: bool = True
) -> AsyncIterator[tuple[str, subprocess.Popen[bytes]]]:
    """``python -m app serve`` on a free port: ``(base URL, process)`` once ready; stopped with
    Ctrl-C on exit (so its log ends with the graceful shutdown)."""
    port = free_port()
    proc = app_process(["serve", "--port", str(port)], env, log, inherit_settings=inherit_settings)
    base_url = f"http://127.0.0.1:{port}"
    with reaped(proc):
        try:
            await wait_ready(base_url, proc, log)
            yield base_url, proc
        finally:
            await stop(proc)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else ""


def worker_env(db: str, srv: OpenAICompatibleServer, tmp: Path, name: str, **extra: str) -> dict:
    """The environment of a standalone worker process on the test database, its model the
    OpenAI-protocol server ``srv``."""
    return {
        "DATABASE_URL": db,
        "THREADKEEPER_LLM_BASE_URL": srv.base_url,
        "THREADKEEPER_LLM_API_KEY": "k",
        "THREADKEEPER_WORKER_POLL_SECONDS": "0.1",
        "THREADKEEPER_HEARTBEAT_SECONDS": "0.5",
        "THREADKEEPER_LEASE_SECONDS": "30",  # recovery by lease expiry must play no part here
        "THREADKEEPER_WORKDIR_ROOT": str(tmp / "wd"),
        "THREADKEEPER_API_KEYS": f"alice:{API_KEY}",
        "THREADKEEPER_LOG_LEVEL": "INFO",
        "THREADKEEPER_LOG_JSON": "true",
        "THREADKEEPER_WORKER_HEARTBEAT_FILE": str(tmp / f"{name}.heartbeat"),
        **extra,
    }
