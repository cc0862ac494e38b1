"""Wake SSE streams when a run gets new events, and workers when a thread may have become
claimable, across processes (PostgreSQL LISTEN/NOTIFY).

Rows stay the source of truth (a stream reads events after its cursor, a worker claims queued
requests); a notification only says "look now", so a lost one costs at most one fallback poll
interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import structlog

from app.db.session import LISTENER_APPLICATION_NAME
from app.repositories.run_events import RUN_EVENTS_CHANNEL as CHANNEL
from app.repositories.runs import WORK_CHANNEL

log = structlog.get_logger(__name__)


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait for ``event`` (then clear it for the next round); False after ``timeout``."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    event.clear()
    return True


class RunEventNotifier:
    def __init__(
        self, conninfo: str, *, streams: bool = True, on_work: Callable[[], None] | None = None
    ) -> None:
        """``streams``: listen for run events (this process serves SSE); ``on_work``: this
        process's worker wake-up, called on every work-channel notification."""
        self.conninfo = conninfo
        self.streams = streams
        self.on_work = on_work
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._listen(), name="run-event-listener")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    @contextlib.contextmanager
    def subscribe(self, run_id: uuid.UUID) -> Iterator[asyncio.Event]:
        """An event set on every notification for the run, for as long as the block runs.

        Subscribe *before* reading the rows, so an event committed between the read and the
        wait still wakes the reader.
        """
        key = str(run_id)
        event = asyncio.Event()
        self._waiters.setdefault(key, set()).add(event)
        try:
            yield event
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    self._waiters.pop(key, None)

    async def wait(self, run_id: uuid.UUID, timeout: float) -> bool:
        """True when the run was notified within ``timeout`` seconds, else False (poll anyway)."""
        with self.subscribe(run_id) as event:
            return await wait_event(event, timeout)

    def _wake(self, key: str) -> None:
        for event in self._waiters.get(key, ()):
            event.set()

    async def _listen(self) -> None:
        backoff = 0.5
        while True:
            try:
                conn: Any = await psycopg.AsyncConnection.connect(
                    self.conninfo,
                    autocommit=True,
                    connect_timeout=10,
                    application_name=LISTENER_APPLICATION_NAME,
                    # A half-open connection must surface as an error, not as silence.
                    keepalives=1,
                    keepalives_idle=30,
                    keepalives_interval=10,
                    keepalives_count=3,
                )
                async with conn:
                    if self.streams:
                        await conn.execute(f"LISTEN {CHANNEL}")
                    if self.on_work is not None:
                        await conn.execute(f"LISTEN {WORK_CHANNEL}")
                    self.connected.set()
                    backoff = 0.5
                    async for notify in conn.notifies():
                        if notify.channel == WORK_CHANNEL:
                            if self.on_work is not None:
                                self.on_work()
                        else:
                            self._wake(notify.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.connected.clear()
                log.warning("run_event_listener_down", error=type(exc).__name__)
                # Streams keep working by polling meanwhile; wake them so none waits a full timeout.
                for key in list(self._waiters):
                    self._wake(key)
                if self.on_work is not None:
                    self.on_work()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
