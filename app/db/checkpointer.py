"""The LangGraph checkpointer, with its waits bounded like every other database wait.

``AsyncPostgresSaver`` runs every checkpoint operation of a process behind ONE asyncio lock and,
holding it, waits for a pool connection for up to the pool's timeout. While connections are being
killed each waiter could wait that long in turn, so waits added up: GetAgentState hung 58.7 s (and
a run's checkpoint write as long) where every other route answered 503 within the pool timeout.
Here the lock wait and the pool wait together are bounded by that one timeout; past it the call
raises psycopg_pool's own ``PoolTimeout``, which the HTTP layer already answers 503
``database_unavailable`` and the worker already treats as a database outage (retry from the last
checkpoint, else ``database_unavailable``), exactly as when the pool itself times out.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import AsyncIterator
from typing import Any

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncConnection, AsyncCursor
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from app.db.session import needs_ping

#: When each checkpointer connection went back to its pool (for ``check_pooled``).
_RETURNED: weakref.WeakKeyDictionary[AsyncConnection[Any], float] = weakref.WeakKeyDictionary()


async def stamp_returned(conn: AsyncConnection[Any]) -> None:
    """The pool's ``reset`` hook: remember when the connection came back."""
    _RETURNED[conn] = time.monotonic()


async def check_pooled(conn: AsyncConnection[Any]) -> None:
    """The pool's ``check`` hook: ``check_connection`` (one round trip), skipped inside a run's
    ``warm_checkouts()`` for a connection back less than a second (app/db/session.py)."""
    if conn.closed or conn.broken or needs_ping(_RETURNED.get(conn)):
        await AsyncConnectionPool.check_connection(conn)


class BoundedPostgresSaver(AsyncPostgresSaver):
    """``AsyncPostgresSaver`` whose operations wait at most ``acquire_timeout`` seconds for the
    saver's lock plus a connection (the statements themselves are not cut short)."""

    def __init__(self, conn: Any, *, acquire_timeout: float) -> None:
        super().__init__(conn)
        self.acquire_timeout = acquire_timeout

    @contextlib.asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        # Every operation of the saver (reads, writes, prune, delete, setup) goes through here.
        async with contextlib.AsyncExitStack() as stack:
            try:
                async with asyncio.timeout(self.acquire_timeout) as waited:
                    cursor = await stack.enter_async_context(super()._cursor(pipeline=pipeline))
            except TimeoutError as exc:
                if not waited.expired():
                    raise
                raise PoolTimeout(
                    f"no checkpointer connection within {self.acquire_timeout} s"
                ) from exc
            yield cursor
