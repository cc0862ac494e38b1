"""The app under test: the API keys of the two test principals, the settings tests start it
with, and ``AppHarness`` (a running app and an httpx client on its ASGI interface; the
``app_factory`` fixture of tests/conftest.py yields one)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from app.config import Settings, load_settings
from app.container import Container

API_KEY = "test-key-alice"
OTHER_KEY = "test-key-bob"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
OTHER_AUTH = {"Authorization": f"Bearer {OTHER_KEY}"}


def make_settings(database_url: str, workdir: Path, **overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "database_url": database_url,
        "workdir_root": str(workdir),
        "api_keys": f"alice:{API_KEY},bob:{OTHER_KEY}",
        "log_json": False,
        "log_level": "WARNING",
        "worker_poll_seconds": 0.05,
        "heartbeat_seconds": 0.5,
        # Long enough that a starved event loop (several suites on 2 shared cores) misses no
        # heartbeat; tests about lease expiry set their own lease or expire it in SQL.
        "lease_seconds": 30.0,
        "lock_timeout_ms": 2000,
        "db_pool_size": 10,
        "checkpointer_pool_size": 10,
        # Tests poll in tight loops; the limiter has its own test.
        "rate_limit_per_second": 0,
        "drain_seconds": 0,
    }
    base.update(overrides)
    return load_settings({}, **base)


class AppHarness:
    """A running app (lifespan entered) with an httpx client on its ASGI interface."""

    def __init__(self, app: Any, client: httpx.AsyncClient) -> None:
        self.app = app
        self.client = client

    @property
    def container(self) -> Container:
        return self.app.state.container  # type: ignore[no-any-return]

    async def run_ids(self, thread_id: str) -> list[str]:
        """Ids of the thread's runs, newest first."""
        resp = await self.client.get(f"/v1/threads/{thread_id}/runs", headers=AUTH)
        return [r["id"] for r in resp.json()["items"]]

    async def sse_events(
        self, run_id: str, *, last_event_id: str | None = None
    ) -> list[dict[str, Any]]:
        """Every event of a run's SSE stream as ``{"event", "id", "data"}`` (data parsed)."""
        headers = {**AUTH, **({"Last-Event-ID": last_event_id} if last_event_id else {})}
        events: list[dict[str, Any]] = []
        current: dict[str, str] = {}
        async with self.client.stream("GET", f"/v1/runs/{run_id}/events", headers=headers) as r:
            assert r.status_code == 200, r.status_code
            async for line in r.aiter_lines():
                if not line:
                    if "data" in current:
                        events.append(
                            {
                                "event": current.get("event"),
                                "id": current.get("id"),
                                "data": json.loads(current["data"]),
                            }
                        )
                    current = {}
                    continue
                key, _, value = line.partition(":")
                if key in ("event", "data", "id"):
                    current[key] = value.strip()
        return events

    async def wait_for_run(
        self,
        thread_id: str,
        *,
        statuses: set[str],
        timeout: float = 30.0,
        exclude: set[str] | None = None,
    ) -> dict[str, Any]:
        """The newest run of the thread once it is in one of ``statuses`` (``exclude``: run ids)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            resp = await self.client.get(f"/v1/threads/{thread_id}/runs", headers=AUTH)
            items = [r for r in resp.json()["items"] if r["id"] not in (exclude or set())]
            if items and items[0]["status"] in statuses:
                return items[0]  # type: ignore[no-any-return]
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"run did not reach {statuses}: {items}")
            await asyncio.sleep(0.05)


AppFactory = Callable[..., contextlib.AbstractAsyncContextManager[AppHarness]]
