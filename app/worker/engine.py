"""The run worker: claims queued input FIFO per idle thread, runs the graph under a lease.

In-process by default (started in the app lifespan); ``python -m app worker`` runs it apart.
This module is the claim loop and the worker's lifecycle (start, drain, stop); a claimed run is
``RunExecutor``'s (app/worker/execution.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import socket
import uuid

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.agents.registry import AgentRegistry
from app.config import WorkerSettings
from app.db.session import warm_checkouts
from app.heartbeat import BeatFile
from app.worker.admission import Admission
from app.worker.claims import ClaimedRun, RunClaims
from app.worker.execution import DrainSignal, RunExecutor

log = structlog.get_logger(__name__)

#: How long input queued by this process waits for intake's NOTIFY before the loop is woken
#: directly (a NOTIFY takes milliseconds; see ``RunWorker.enqueued``).
NOTIFY_GRACE_SECONDS = 0.5


class RunWorker:
    def __init__(
        self,
        *,
        settings: WorkerSettings,
        sessions: async_sessionmaker[AsyncSession],
        engine: AsyncEngine,
        agents: AgentRegistry,
        holder: str | None = None,
        max_concurrent_runs: int | None = None,
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        self.engine = engine
        self.agents = agents
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.claims = RunClaims(
            sessions,
            self.holder,
            settings.lease_seconds,
            settings.run_events_retention_seconds,
            engine=engine,
        )
        self._drain = DrainSignal()
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        #: When the listener last delivered a work notification (loop time).
        self._notified_at = -math.inf
        self._runs: dict[uuid.UUID, asyncio.Task[None]] = {}
        #: Runs held at once: at most ``worker_concurrency``, and none more while the event
        #: loop lags or the database pools are pressed (app/worker/admission.py; the container
        #: sets ``admission.pressed``).
        self.admission = Admission(
            max_concurrent_runs or settings.worker_concurrency,
            settings.worker_max_loop_lag_ms / 1000,
        )
        #: The listener's "connected" flag (set by the container): while it is set, NOTIFY
        #: wakes this worker and the claim loop polls only every ``worker_idle_poll_seconds``.
        self.listening: asyncio.Event | None = None
        #: Touched by the claim loop (standalone worker): ``python -m app worker --check``.
        self.heartbeat: BeatFile | None = None

    @functools.cached_property
    def executor(self) -> RunExecutor:
        # Built on first use: the claim loop alone needs no agent runtime.
        return RunExecutor(
            settings=self.settings,
            sessions=self.sessions,
            engine=self.engine,
            agents=self.agents,
            holder=self.holder,
            drain=self._drain,
        )

    @property
    def waiting_for_database(self) -> set[uuid.UUID]:
        """Runs waiting for the database to answer again before they go on."""
        return self.executor.outage.waiting

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self._drain.stopping = False
        self._drain.handoff.clear()
        # The claim loop's checkouts are warm like its runs' (app/db/session.py): it goes round
        # after every turn, and a ping per look was two of a turn's round trips. A connection
        # that died in between fails that round, which is retried at the next (short) poll.
        with warm_checkouts():
            self._loop_task = asyncio.create_task(self._loop(), name="run-worker")
        self.admission.start()

    async def stop(self) -> None:
        """Stop now: in-flight runs are released (see ``drain``) without a grace period."""
        await self.drain(0)

    async def drain(self, seconds: float) -> None:
        """Graceful stop (SIGTERM): claim nothing more, let running turns finish within
        ``seconds``, then stop the rest at a step boundary (waiting at most ``seconds`` more)
        and release them, so another worker continues from the last checkpoint: a step whose
        result is already checkpointed (a tool that ran) is never executed again."""
        self._drain.stopping = True
        self._wake.set()
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._loop_task
        await self.admission.stop()
        running = [t for t in self._runs.values() if not t.done()]
        had_runs = bool(running)
        if running and seconds > 0:
            log.info("worker_draining", runs=len(running), seconds=seconds)
            await asyncio.wait(running, timeout=seconds)
        running = [t for t in running if not t.done()]
        if running:
            log.info("worker_handing_off", runs=len(running))
            self._drain.handoff.set()
            if seconds > 0:
                await asyncio.wait(running, timeout=seconds)
        for t in running:
            t.cancel()  # no step boundary in time: released all the same, that step redone
        for t in running:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if had_runs:
            # Nobody is notified of the runs handed back, nor of input queued behind the turns
            # that finished meanwhile (this worker would have claimed it): wake the others.
            with contextlib.suppress(Exception):
                await self.claims.announce()

    def notified(self) -> None:
        """The listener delivered a work notification (or came up or went down)."""
        self._notified_at = asyncio.get_running_loop().time()
        self._wake.set()

    def enqueued(self) -> None:
        """This process queued input: wake the loop now if nobody listens, else only if no
        notification arrived within ``NOTIFY_GRACE_SECONDS``. Intake's NOTIFY reaches the
        listener within milliseconds, and a second, immediate wake-up raced it into another
        look at the queue, which found nothing; the late one covers a listener whose
        connection died unnoticed (until its keepalives tell, its notifications are lost)."""
        if not self._notified():
            self._wake.set()
            return
        loop = asyncio.get_running_loop()
        loop.call_later(NOTIFY_GRACE_SECONDS, self._unless_notified_since, loop.time())

    def _unless_notified_since(self, queued_at: float) -> None:
        if self._notified_at < queued_at:
            self._wake.set()

    def cancel_local(self, run_id: uuid.UUID) -> None:
        task = self._runs.get(run_id)
        if task is not None:
            task.cancel()

    # --- the claim loop -------------------------------------------------------------------------
    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        recover_at = pruned_at = -math.inf
        while not self._drain.stopping:
            failed = False
            # Cleared before the claim round, not after it: a wake-up arriving while this round
            # runs (a commit its query could not see yet) must make the wait below return at
            # once instead of being erased (a lost wake-up cost a full poll interval).
            self._wake.clear()
            try:
                # Housekeeping on its own clock: an intake wake (hundreds per second under load)
                # must cost nothing while every slot is busy, not a recovery transaction each.
                now = loop.time()
                if now >= recover_at:
                    recover_at = now + self._poll()  # kept if the look fails (database down)
                    await self.recover_expired()
                    recover_at = now + self._recovery_interval()
                if now - pruned_at >= self.prune_interval():
                    pruned_at = now
                    await self.prune_run_events()
                while not self._drain.stopping and await self._claim_and_spawn():
                    pass
                await self._beat()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error("worker_loop_error", error=repr(exc))
                failed = True
            poll = self.settings.worker_poll_seconds if failed else self._poll()
            due = min(recover_at, pruned_at + self.prune_interval(), loop.time() + poll)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(due - loop.time(), 0.0))

    def _notified(self) -> bool:
        """True while a listener delivers the work channel's notifications to ``wake``."""
        return self.listening is not None and self.listening.is_set()

    def _poll(self) -> float:
        """The longest the loop sleeps without a wake-up: rare while notifications arrive (a
        safety net), ``worker_poll_seconds`` while they cannot, or after a round that saw
        claimable threads all held by other transactions (one of them may let go without
        anyone being notified: a metadata update, a compression)."""
        if not self._notified() or self.claims.contended:
            return self.settings.worker_poll_seconds
        return self.settings.worker_idle_poll_seconds

    def _recovery_interval(self) -> float:
        """Until the next look for expired leases: at the next lease's expiry (leases are
        extended meanwhile, so that look often finds none and sets a later one), at most a
        poll period away, at least ``worker_poll_seconds``."""
        upper = self._poll()
        expiry = self.claims.next_expiry_in
        if expiry is None:
            return upper
        return min(max(expiry + 0.05, self.settings.worker_poll_seconds), upper)

    async def _beat(self) -> None:
        """Record that the claim loop just went round with a working database."""
        if self.heartbeat is not None:
            await self.heartbeat.beat(holder=self.holder, pid=os.getpid())

    def prune_interval(self) -> float:
        """How often finished runs' events are pruned: a tenth of the retention, 1 s to 5 min."""
        retention = self.settings.run_events_retention_seconds
        return math.inf if retention <= 0 else min(max(retention / 10, 1.0), 300.0)

    async def prune_run_events(self) -> int:
        return await self.claims.prune_run_events()

    async def recover_expired(self) -> int:
        return await self.claims.recover_expired()

    async def claim_next(self) -> ClaimedRun | None:
        return await self.claims.claim_next()

    async def release(self, claimed: ClaimedRun) -> None:
        """Hand a claimed run back for another worker (what drain does to a stopped run)."""
        await self.executor.outcomes.release(claimed)

    async def _claim_resumable(self) -> ClaimedRun | None:
        """Runs handed back go first, looked for only while one may wait (``handed_back``)."""
        if not self.claims.handed_back:
            return None
        return await self.claims.claim_resumable()

    async def _claim_and_spawn(self) -> bool:
        if not self.admission.admits():
            return False
        # Claims in a burst outrun the lag probe and the pools: yield once per claim, so both
        # see the runs just started before the next one is taken.
        await asyncio.sleep(0)
        claimed = await self._claim_resumable() or await self.claims.claim_next()
        if claimed is None:
            claimed = await self._claim_resumable()  # the look at the queue saw one
        if claimed is None:
            return False
        self.admission.taken()
        with warm_checkouts():  # the run's task and every task it starts (app/db/session.py)
            task = asyncio.create_task(self.executor.execute(claimed), name=f"run-{claimed.run_id}")
        self._runs[claimed.run_id] = task

        def _done(_: asyncio.Task[None], run_id: uuid.UUID = claimed.run_id) -> None:
            self._runs.pop(run_id, None)
            self.admission.done()
            self._wake.set()

        task.add_done_callback(_done)
        # Another look only if this one saw more to take: a look that took the only ready
        # thread would find nothing now (a miss was a third of a turn's claim statements), and
        # input arriving meanwhile is not lost: it notifies, and ``_wake`` was cleared before
        # this round began.
        return self.claims.more_ready
