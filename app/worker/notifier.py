"""Wake SSE streams when a run gets new events, and workers when a thread may have become
claimable, across processes (PostgreSQL LISTEN/NOTIFY).

Rows stay the source of truth (a stream reads events after its cursor, a worker claims queued
requests); a notification only says "look now". While the listener is connected, followers read
``run_events`` only when notified (an idle follower costs the database nothing); while it is
down they fall back to polling every FALLBACK_POLL_SECONDS, and every change of the listener's
state wakes them all, so nothing committed in between is missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import structlog
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    wait_exponential,
)

from app.db.session import LISTENER_APPLICATION_NAME
from app.repositories.run_events import RUN_EVENTS_CHANNEL
from app.repositories.runs import WORK_CHANNEL

log = structlog.get_logger(__name__)

#: Followers re-read this often, but only while the listener is down (the fallback).
FALLBACK_POLL_SECONDS = 1.0
#: After a lost listener connection, the pause before reconnecting; failed connects then back
#: off exponentially up to RECONNECT_MAX_SECONDS.
RECONNECT_FIRST_SECONDS = 0.5
RECONNECT_MAX_SECONDS = 10.0


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

    async def next_read(self, event: asyncio.Event, timeout: float) -> bool:
        """Wait until a follower subscribed with ``event`` should read the run's rows again.

        True: read now (notified, or the fallback poll while the listener is down); False:
        ``timeout`` passed with nothing new (only possible while the listener is connected,
        which would have said so).
        """
        if self.connected.is_set():
            return await wait_event(event, timeout)
        # Fallback: no listener, so no notification will come; poll. A reconnect wakes us.
        await wait_event(event, min(timeout, FALLBACK_POLL_SECONDS))
        return True

    def _wake(self, key: str) -> None:
        for event in self._waiters.get(key, ()):
            event.set()

    def _wake_all(self) -> None:
        for key in list(self._waiters):
            self._wake(key)

    async def _listen(self) -> None:
        while True:
            try:
                conn = await self._connect()
                async with conn:
                    await self._relay(conn)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._went_down(type(exc).__name__)
            else:  # the server ended the notification stream
                self._went_down("closed")
            await asyncio.sleep(RECONNECT_FIRST_SECONDS)

    async def _connect(self) -> Any:
        """A listening connection; failures are retried with exponential backoff, and meanwhile
        followers poll (the fallback) and the worker is woken to poll."""
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(Exception),
            wait=wait_exponential(
                multiplier=RECONNECT_FIRST_SECONDS,
                min=RECONNECT_FIRST_SECONDS,
                max=RECONNECT_MAX_SECONDS,
            ),
            before_sleep=self._connect_failed,
        ):
            with attempt:
                conn: Any = await psycopg.AsyncConnection.connect(
                    self.conninfo,
                    autocommit=True,
                    connect_timeout=10,
                    fallback_application_name=LISTENER_APPLICATION_NAME,
                    # A half-open connection must surface as an error, not as silence.
                    keepalives=1,
                    keepalives_idle=30,
                    keepalives_interval=10,
                    keepalives_count=3,
                )
                try:
                    if self.streams:
                        await conn.execute(f"LISTEN {RUN_EVENTS_CHANNEL}")
                    if self.on_work is not None:
                        await conn.execute(f"LISTEN {WORK_CHANNEL}")
                except BaseException:
                    await conn.close()
                    raise
                return conn
        raise AssertionError("unreachable: AsyncRetrying retries forever")  # pragma: no cover

    async def _relay(self, conn: Any) -> None:
        """Dispatch notifications until the connection fails."""
        self.connected.set()
        # Whatever was committed while nobody listened: every follower reads once more (they
        # then wait for notifications instead of polling), and the worker looks for work.
        self._wake_all()
        if self.on_work is not None:
            self.on_work()
        async for notify in conn.notifies():
            if notify.channel == WORK_CHANNEL:
                if self.on_work is not None:
                    self.on_work()
            else:
                self._wake(notify.payload)

    def _connect_failed(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        self._went_down(type(exc).__name__)

    def _went_down(self, error: str) -> None:
        self.connected.clear()
        log.warning("run_event_listener_down", error=error)
        # Followers switch to polling; wake them so none waits a full timeout first.
        self._wake_all()
        if self.on_work is not None:
            self.on_work()
