"""Polling until something holds (never a timed assertion: the timeout only stops a hang)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx

from tests.support.app_harness import AUTH

TERMINAL = ("completed", "failed", "cancelled")


async def wait_until(
    predicate: Callable[[], Awaitable[bool]],
    what: str,
    timeout: float = 90,
    interval: float = 0.1,
) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(interval)


async def wait_terminal(client: httpx.AsyncClient, tid: str, count: int) -> str:
    """The status of the thread's newest run once it has ``count`` runs and the newest ended."""
    status = ""

    async def ended() -> bool:
        nonlocal status
        runs = (await client.get(f"/v1/threads/{tid}/runs", headers=AUTH)).json()["items"]
        status = runs[0]["status"] if len(runs) == count else ""
        return status in TERMINAL

    await wait_until(ended, f"run {count} of thread {tid} to end", timeout=60, interval=0.05)
    return status
