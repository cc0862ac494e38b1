"""How many runs a worker takes on: admission control for I/O-bound runs.

A run spends nearly all its time waiting on a provider (seconds per model call), so a worker holds
hundreds at once (``worker_concurrency`` is the cap). What it cannot hold is more CPU work than its
one event loop does in time: past that, every run it holds gets slower (their streamed tokens,
tool calls and writes queue behind each other) and the runs it claimed would have been served
sooner by another worker or left queued in PostgreSQL, where waiting costs nothing. So the claim
loop also asks the loop's lag: a probe sleeps ``PROBE_SECONDS`` and measures how late it woke up
(smoothed); while that lag is over ``worker_max_loop_lag_ms``, no new run is claimed (runs it
holds go on; the queue and other workers take the rest). Nor while the database pools are
pressed (``pressed``: the repositories' pool nearly all checked out, or anyone waiting for a
checkpointer connection): a run starting then would queue behind the others' statements until
the pool timeout failed it, and API requests would wait with it. A worker always takes ``FLOOR``
runs, so a machine slowed by something else never stops it altogether.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import structlog

from app import metrics

log = structlog.get_logger(__name__)

#: Seconds between two probes of the loop's lag.
PROBE_SECONDS = 0.05
#: Weight of the newest probe in the smoothed lag.
SMOOTHING = 0.3
#: Runs a worker takes whatever the lag (the default concurrency before admission control).
FLOOR = 4


class Admission:
    def __init__(
        self, limit: int, max_lag_seconds: float, pressed: Callable[[], bool] | None = None
    ) -> None:
        self.limit = limit
        self.max_lag = max_lag_seconds
        #: True while the database pools have no room for another run (set by the container).
        self.pressed = pressed
        #: Runs held now (claimed and not finished).
        self.active = 0
        #: The loop's smoothed lag, seconds.
        self.lag = 0.0
        self._probe: asyncio.Task[None] | None = None
        #: Set while the lag holds claims back (logged once per episode).
        self._holding = False

    def admits(self) -> bool:
        """Whether one more run may be claimed now."""
        if self.active >= self.limit:
            return False
        lagging = self.max_lag > 0 and self.lag >= self.max_lag
        if self.active < FLOOR or not (lagging or (self.pressed is not None and self.pressed())):
            if self._holding:
                self._holding = False
                log.info("worker_admitting", runs=self.active, lag_ms=round(self.lag * 1000))
            return True
        if not self._holding:
            self._holding = True
            metrics.ADMISSION_HELD.inc()
            log.info(
                "worker_holding_claims",
                runs=self.active,
                lag_ms=round(self.lag * 1000),
                reason="loop_lag" if lagging else "database_pools",
            )
        return False

    def taken(self) -> None:
        self.active += 1
        metrics.WORKER_RUNS.inc()

    def done(self) -> None:
        self.active -= 1
        metrics.WORKER_RUNS.dec()

    def start(self) -> None:
        if self._probe is None and self.max_lag > 0:
            self._probe = asyncio.create_task(self._measure(), name="worker-loop-lag")

    async def stop(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
            self._probe = None

    async def _measure(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await asyncio.sleep(PROBE_SECONDS)
            late = max(0.0, loop.time() - started - PROBE_SECONDS)
            self.lag += SMOOTHING * (late - self.lag)
            metrics.LOOP_LAG.set(self.lag)


def pools_pressed(engine: Any, pool: Any) -> Callable[[], bool]:
    """Whether the repositories' pool (an ``AsyncEngine``'s) has fewer than a quarter of its
    connections free (kept for API requests), or anyone waits for a checkpointer connection
    (a psycopg ``AsyncConnectionPool``)."""

    def pressed() -> bool:
        sql = engine.pool
        if sql.checkedout() >= sql.size() - sql.size() // 4:
            return True
        return int(pool.get_stats().get("requests_waiting", 0)) > 0

    return pressed
