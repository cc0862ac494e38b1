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


class RateLimiter:
    """One bucket per principal. Principals come from configured keys, so the map stays small."""

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._buckets: dict[str, TokenBucket] = {}

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
            bucket = self._buckets[principal] = TokenBucket(self.rate, self.burst, now)
        wait = bucket.take(now)
        return 0 if wait == 0 else max(1, math.ceil(wait))


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
