"""Admission of run followers: SSE event streams and WaitRun long-polls.

A follower holds an HTTP connection (and a little memory) for as long as it waits, so a
principal may hold at most ``per_principal`` of them in a process (429 ``too_many_streams``)
and the process at most ``total`` (503 ``streams_unavailable``). Both are checked *before* the
response starts: an open stream is never cut to make room. At shutdown ``close()`` ends every
stream and long-poll cleanly (a stream's last frame, then the end of the body) and refuses new
ones, so the server's graceful shutdown is not held open by clients that never leave.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections import Counter
from collections.abc import Iterator

from app.domain.errors import StreamsUnavailable, TooManyStreams


class FollowerLease:
    """One admitted follower; ``release()`` (idempotent) gives its place back.

    A streaming response whose body is never iterated (the client left before it started)
    never runs the body's ``finally``: the place is then given back when the lease is
    garbage-collected, so such streams cannot leak places.
    """

    def __init__(self, followers: Followers, principal: str) -> None:
        self.release = weakref.finalize(self, followers._leave, principal)


class Followers:
    def __init__(self, per_principal: int, total: int) -> None:
        """``per_principal`` / ``total``: 0 means unlimited."""
        self.per_principal = per_principal
        self.total = total
        self._open: Counter[str] = Counter()
        #: Set when the server starts shutting down: followers end, new ones are refused.
        self.closing = asyncio.Event()

    def open_count(self, principal: str | None = None) -> int:
        return self._open.total() if principal is None else self._open[principal]

    def admit(self, principal: str) -> FollowerLease:
        if self.closing.is_set():
            raise StreamsUnavailable("the server is shutting down; retry on another instance")
        if self.per_principal and self._open[principal] >= self.per_principal:
            raise TooManyStreams(
                f"at most {self.per_principal} open event streams and long-polls per API key "
                "(per server process); close one first"
            )
        if self.total and self._open.total() >= self.total:
            raise StreamsUnavailable(
                f"this server process already follows {self.total} runs; retry later"
            )
        self._open[principal] += 1
        return FollowerLease(self, principal)

    @contextlib.contextmanager
    def hold(self, principal: str) -> Iterator[None]:
        """Admitted for the duration of the block (a long-poll)."""
        lease = self.admit(principal)
        try:
            yield
        finally:
            lease.release()

    def close(self) -> None:
        """Shutdown began: end every follower now and admit no more."""
        self.closing.set()

    def _leave(self, principal: str) -> None:
        self._open[principal] -= 1
        if self._open[principal] <= 0:
            del self._open[principal]
