"""Per-principal token bucket for /v1 (in process memory: each API process limits on its own)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from litestar.connection import ASGIConnection
from litestar.exceptions import TooManyRequestsException
from litestar.handlers.base import BaseRouteHandler

from app import metrics


class TokenBucket:
    """``rate`` tokens per second up to ``burst``; a request takes one."""

    __slots__ = ("burst", "rate", "stamp", "tokens")

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.stamp = now

    def take(self, now: float) -> float:
        """0 when a token was taken, else the seconds until one is available."""
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


#: Buckets kept before idle ones (refilled to full: the same as a new one) are dropped.
PRUNE_AT = 10_000


class RateLimiter:
    """One bucket per principal. Signed-in users make principals unbounded: once the map holds
    ``PRUNE_AT`` buckets, the full ones are dropped (the next pruning waits until the map has
    doubled again, so a map of busy principals is not rescanned per request)."""

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._buckets: dict[str, TokenBucket] = {}
        self._prune_at = PRUNE_AT

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def retry_after(self, principal: str) -> int:
        """0: allowed (a token was taken); else whole seconds to wait (``Retry-After``)."""
        if not self.enabled:
            return 0
        now = self.clock()
        bucket = self._buckets.get(principal)
        if bucket is None:
            if len(self._buckets) >= self._prune_at:
                self._prune(now)
            bucket = self._buckets[principal] = TokenBucket(self.rate, self.burst, now)
        wait = bucket.take(now)
        return 0 if wait == 0 else max(1, math.ceil(wait))

    def _prune(self, now: float) -> None:
        self._buckets = {
            principal: bucket
            for principal, bucket in self._buckets.items()
            if bucket.tokens + (now - bucket.stamp) * bucket.rate < bucket.burst
        }
        self._prune_at = max(PRUNE_AT, 2 * len(self._buckets))

    def __len__(self) -> int:
        return len(self._buckets)


async def rate_limit_guard(
    connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler
) -> None:
    """Runs after ``api_key_guard``, on the event loop (buckets are not thread-safe).

    Unauthenticated calls never count; a request the auth guard let through without a principal
    (e.g. a CORS preflight) has nothing to be limited by.
    """
    principal = getattr(connection.state, "principal", None)
    if principal is None:
        return
    limiter: RateLimiter = connection.app.state.rate_limiter
    wait = limiter.retry_after(str(principal))
    if wait:
        metrics.RATE_LIMITED.inc()
        raise TooManyRequestsException(
            detail=f"rate limit of {limiter.rate:g} requests/s (burst {limiter.burst}) exceeded",
            headers={"Retry-After": str(wait)},
        )
