"""The LangGraph checkpointer, with its waits bounded like every other database wait.

``AsyncPostgresSaver`` runs every checkpoint operation of a process behind ONE asyncio lock and,
holding it, waits for a pool connection for up to the pool's timeout. While connections are being
killed each waiter could wait that long in turn, so waits added up: GetAgentState hung 58.7 s (and
a run's checkpoint write as long) where every other route answered 503 within the pool timeout.
Here that lock is gone when the saver has a pool (each operation has a connection of its own, so
64 concurrent runs no longer queue every checkpoint read and write behind one another), and the
pool wait (plus the lock's, on a single shared connection) is bounded by that one timeout; past
it the call raises psycopg_pool's own ``PoolTimeout``, which the HTTP layer already answers 503
``database_unavailable`` and the worker already treats as a database outage (retry from the last
checkpoint, else ``database_unavailable``), exactly as when the pool itself times out.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import AsyncIterator, Sequence
from typing import Any

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncConnection, AsyncCursor
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from app.db.checkpoint_prune import keep_latest
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
    """``AsyncPostgresSaver`` whose operations wait at most ``acquire_timeout`` seconds for a
    connection (the statements themselves are not cut short), run concurrently when it is given
    a pool, and prune a thread in one statement."""

    def __init__(self, conn: Any, *, acquire_timeout: float) -> None:
        super().__init__(conn)
        self.acquire_timeout = acquire_timeout

    @contextlib.asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        # Every operation of the saver (reads, writes, prune, delete, setup) goes through here.
        async with contextlib.AsyncExitStack() as stack:
            try:
                async with asyncio.timeout(self.acquire_timeout) as waited:
                    cursor = await stack.enter_async_context(self._cursor_unbounded(pipeline))
            except TimeoutError as exc:
                if not waited.expired():
                    raise
                raise PoolTimeout(
                    f"no checkpointer connection within {self.acquire_timeout} s"
                ) from exc
            yield cursor

    def _cursor_unbounded(
        self, pipeline: bool
    ) -> contextlib.AbstractAsyncContextManager[AsyncCursor[DictRow]]:
        """Upstream's cursor, minus its process-wide lock when each operation has a connection of
        its own (a pool): the lock only guards a shared single connection, and with a pool it
        made every checkpoint read and write of the process (64 concurrent runs) wait in one
        line."""
        if isinstance(self.conn, AsyncConnectionPool) and self.pipe is None:
            return _pooled_cursor(
                self.conn,
                pipeline=pipeline and self.supports_pipeline,
                transaction=pipeline and not self.supports_pipeline,
            )
        return super()._cursor(pipeline=pipeline)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest`` in one statement per thread (app/db/checkpoint_prune.py), upstream's
        general prune for a thread that statement does not cover and for other strategies."""
        if strategy != "keep_latest" or isinstance(thread_ids, str):
            await super().aprune(thread_ids, strategy=strategy)
            return
        general = []
        for thread_id in map(str, thread_ids):
            async with self._cursor() as cur:
                if not await keep_latest(cur, thread_id):
                    general.append(thread_id)
        if general:
            await super().aprune(general, strategy=strategy)


@contextlib.asynccontextmanager
async def _pooled_cursor(
    pool: AsyncConnectionPool[Any], *, pipeline: bool, transaction: bool
) -> AsyncIterator[AsyncCursor[DictRow]]:
    """A cursor on a connection of its own, in pipeline mode when asked (one round trip for a
    checkpoint's blobs and row) or, without libpq pipeline support, in a transaction: what
    upstream's ``_cursor`` does on a pool."""
    async with pool.connection() as conn:
        if pipeline:
            async with conn.pipeline(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                yield cur
        elif transaction:
            async with conn.transaction(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                yield cur
        else:
            async with conn.cursor(binary=True, row_factory=dict_row) as cur:
                yield cur
