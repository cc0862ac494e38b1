"""Following a run: the SSE event stream and WaitRun's long-poll.

Followers read ``run_events`` / ``agent_runs`` only when there is news: when the listener
(``RunEventNotifier``) relays a NOTIFY for the run, or — the fallback, only while the listener
is down — every ``FALLBACK_POLL_SECONDS``. An idle follower of a connected process costs the
database nothing (it used to cost one transaction per second each: 2,000 idle followers
exhausted the SQL pool). Followers woken together (all followers of one run at its next event)
read through a few slots so that ordinary requests keep most of the pool, and a read that finds
the database unreachable is retried at the next poll instead of cutting the open stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.errors import is_connection_error
from app.db.models import AgentRun, RequestStatus, RunEvent, RunStatus
from app.domain.errors import DatabaseUnavailable, NotFound
from app.repositories.run_events import RunEventRepository
from app.repositories.runs import RunRepository, RunRequestRepository
from app.services.runs import RequestView
from app.worker.notifier import FALLBACK_POLL_SECONDS, RunEventNotifier

log = structlog.get_logger(__name__)

T = TypeVar("T")

TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})


async def _unless_stopped(waiting: Awaitable[T], stop: asyncio.Event) -> T | None:
    """``waiting``'s result, or None as soon as ``stop`` is set (``waiting`` is cancelled)."""
    task = asyncio.ensure_future(waiting)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
    return task.result() if task.done() and not task.cancelled() else None


class RunFeed:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        notifier: RunEventNotifier | None,
        read_slots: int,
    ) -> None:
        self.sessions = sessions
        self.notifier = notifier
        self._reads = asyncio.Semaphore(max(1, read_slots))

    async def events_after(
        self, run_id: uuid.UUID, owner_id: str, after_id: int
    ) -> tuple[Sequence[RunEvent], RunStatus]:
        """The run's events after ``after_id`` and its status; NotFound for another owner's."""
        async with self.sessions() as session:
            run = await RunRepository(session).get_owned(run_id, owner_id)
            events = await RunEventRepository(session).after(run_id, after_id)
            return events, run.status

    async def get(self, run_id: uuid.UUID, owner_id: str) -> AgentRun:
        async with self.sessions() as session:
            run = await RunRepository(session).get_owned(run_id, owner_id)
            return run

    async def follow(
        self,
        run_id: uuid.UUID,
        owner_id: str,
        after: int,
        *,
        keepalive: float,
        stop: asyncio.Event,
    ) -> AsyncIterator[Sequence[RunEvent]]:
        """Batches of the run's events after ``after``, and an empty batch after every
        ``keepalive`` seconds without one. Ends after the final status event, when the run
        had ended before ``after``, when it is gone (thread deleted), or once ``stop`` is set.
        """
        loop = asyncio.get_running_loop()
        cursor = after
        quiet_since = loop.time()
        async with self._subscription(run_id) as news:
            read, failed = True, False
            while not stop.is_set():
                if read:
                    try:
                        got = await self._read_tolerantly(run_id, owner_id, cursor)
                    except NotFound:
                        return  # the thread was deleted meanwhile
                    failed = got is None  # the database did not answer: keep the stream
                    if got is not None:
                        events, status = got
                        if events:
                            yield events
                            cursor = events[-1].id
                            quiet_since = loop.time()
                            if any(e.type == "status" and e.data.get("final") for e in events):
                                return
                            continue  # a full page may have more behind it
                        if status in TERMINAL:
                            return  # drained and finished (its final event was before ``after``)
                silent = loop.time() - quiet_since
                if silent >= keepalive:
                    yield ()  # the caller sends a keep-alive comment
                    quiet_since, silent = loop.time(), 0.0
                if failed:  # retry the read shortly, whatever the listener says
                    pause = min(FALLBACK_POLL_SECONDS, keepalive - silent)
                    await _unless_stopped(asyncio.sleep(pause), stop)
                    read = True
                else:
                    read = bool(await _unless_stopped(news(keepalive - silent), stop))

    async def wait(
        self, run_id: uuid.UUID, owner_id: str, timeout: float, *, stop: asyncio.Event
    ) -> AgentRun:
        """The run as soon as it is no longer ``running`` (or as it is after ``timeout``, or
        when ``stop`` is set). Every status change writes an event, so it re-reads the run only
        when the run was notified (or, while the listener is down, on the fallback poll)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async with self._subscription(run_id) as news:
            run = await self.get(run_id, owner_id)
            while run.status == RunStatus.RUNNING and not stop.is_set():
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                if await _unless_stopped(news(remaining), stop):
                    async with self._reads:
                        run = await self._tolerant(self.get(run_id, owner_id)) or run
            return run

    async def request(self, request_id: uuid.UUID, owner_id: str) -> RequestView:
        async with self.sessions() as session:
            request = await RunRequestRepository(session).get_owned(request_id, owner_id)
            return RequestView(request, await RunRepository(session).for_request(request_id))

    async def wait_request(
        self, request_id: uuid.UUID, owner_id: str, timeout: float, *, stop: asyncio.Event
    ) -> RequestView:
        """The request as soon as it is no longer ``queued`` (dispatched, with its run, or
        cancelled), or as it is after ``timeout`` / when ``stop`` is set. Dispatch and
        cancellation notify the request id (``RunRequestRepository.mark``), so a waiter reads
        only then (or on the fallback poll while the listener is down)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async with self._subscription(request_id) as news:
            view = await self.request(request_id, owner_id)
            while view.request.status == RequestStatus.QUEUED and not stop.is_set():
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                if await _unless_stopped(news(remaining), stop):
                    async with self._reads:
                        view = await self._tolerant(self.request(request_id, owner_id)) or view
            return view

    @contextlib.asynccontextmanager
    async def _subscription(
        self, run_id: uuid.UUID
    ) -> AsyncIterator[Callable[[float], Awaitable[bool]]]:
        """A ``news(timeout)`` that returns True when the run should be read again.

        Subscribed on entry, before the first read, so events committed while the caller
        reads are not missed. Without a notifier (no listener at all) it always polls.
        """
        if self.notifier is None:

            async def poll(timeout: float) -> bool:
                await asyncio.sleep(min(timeout, FALLBACK_POLL_SECONDS))
                return True

            yield poll
            return
        notifier = self.notifier
        with notifier.subscribe(run_id) as event:

            async def news(timeout: float) -> bool:
                return await notifier.next_read(event, timeout)

            yield news

    async def _read_tolerantly(
        self, run_id: uuid.UUID, owner_id: str, cursor: int
    ) -> tuple[Sequence[RunEvent], RunStatus] | None:
        async with self._reads:
            return await self._tolerant(self.events_after(run_id, owner_id, cursor))

    @staticmethod
    async def _tolerant(read: Awaitable[T]) -> T | None:
        """``read``'s result, or None when the database could not be reached (pool exhausted,
        connection lost): an open follower waits for it rather than failing."""
        try:
            return await read
        except Exception as exc:
            if not (isinstance(exc, DatabaseUnavailable) or is_connection_error(exc)):
                raise
            log.warning("follower_read_failed", error=type(exc).__name__)
            return None
