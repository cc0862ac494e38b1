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
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, TypeVar

import structlog
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from psycopg import AsyncConnection, AsyncCursor
from psycopg.errors import UniqueViolation
from psycopg.rows import DictRow, dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from app.db import checkpoint_codec, checkpoint_delta
from app.db.checkpoint_prune import has_deltas, keep_latest, keep_turns
from app.db.checkpoint_sql import (
    INSERT_BLOB_SQL,
    INSERT_WRITE_SQL,
    PUT_CHECKPOINT_SQL,
    PUT_WRITES_SQL,
    UPSERT_CHECKPOINT_SQL,
    put_checkpoint_params,
    put_writes_params,
)
from app.db.session import needs_ping

log = structlog.get_logger(__name__)
_T = TypeVar("_T")

#: Upstream's saver migrations minus the three ``*_thread_id_idx`` indexes (replaced by no-ops: the
#: saver numbers its migrations by position): each table's primary key already leads with
#: ``thread_id``, and the indexes cost ~1.8 KB of WAL per trivial turn. Alembic's 0008_i23_wal drops
#: them where an earlier version created them.
MIGRATIONS = ["SELECT 1;" if "_thread_id_idx" in m else m for m in AsyncPostgresSaver.MIGRATIONS]
#: ``pg_advisory_lock`` key held around the saver's setup (any constant unique to this purpose).
SETUP_LOCK_KEY = 0x546B_436B_7074  # "TkCkpt"

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

    #: Reads rebuild delta-stored channels (app/db/checkpoint_delta.py) in the same statement.
    SELECT_SQL = checkpoint_delta.SELECT_SQL

    def __init__(self, conn: Any, *, acquire_timeout: float) -> None:
        super().__init__(conn, serde=checkpoint_codec.CompressingSerializer())
        self.acquire_timeout = acquire_timeout
        self.lineage = checkpoint_delta.Lineage()

    MIGRATIONS = MIGRATIONS

    async def setup(self) -> None:
        """Upstream's ``setup`` (apply the migrations past the recorded version) in one
        transaction under a transaction-level advisory lock: upstream takes no lock, and two
        processes starting at once both applied the same migration and one failed on
        ``checkpoint_migrations``' primary key. Transaction-level, so it also holds behind a
        transaction pooler (a session lock and its unlock could reach different server
        connections there); none of the migrations needs to run outside a transaction (the
        ``CONCURRENTLY`` index builds are the no-ops above)."""
        async with self._cursor() as cur, cur.connection.transaction():
            await cur.execute("SELECT pg_advisory_xact_lock(%s)", (SETUP_LOCK_KEY,))
            await cur.execute(self.MIGRATIONS[0])
            row = await (
                await cur.execute("SELECT max(v) AS v FROM checkpoint_migrations")
            ).fetchone()
            done = -1 if row is None or row["v"] is None else int(row["v"])
            for v in range(done + 1, len(self.MIGRATIONS)):
                await cur.execute(self.MIGRATIONS[v])
                await cur.execute("INSERT INTO checkpoint_migrations (v) VALUES (%s)", (v,))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Short versions (app/db/checkpoint_codec.py): ~50 -> 2-4 characters, each checkpoint
        row holds several."""
        return checkpoint_codec.next_version(current)

    def _load_blobs(self, blob_values: Any) -> dict[str, Any]:
        return checkpoint_delta.load_blobs(self.serde, blob_values)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Upstream's ``aput`` (the changed channels' blobs and the checkpoint row, here in one
        statement: app/db/checkpoint_sql.py), with list channels written as deltas where that is
        safe (app/db/checkpoint_delta.py)."""
        configurable = config["configurable"]
        thread_id, checkpoint_ns = configurable["thread_id"], configurable["checkpoint_ns"]
        parent_id = configurable.get("checkpoint_id")
        row = dict(checkpoint)
        values = dict(checkpoint["channel_values"])
        inline = {k: v for k, v in values.items() if _inline(v)}
        row["channel_values"] = inline
        blobs = {k: v for k, v in values.items() if k not in inline}
        if any(isinstance(v, _DeltaSnapshot) for v in blobs.values()):
            return await super().aput(config, checkpoint, metadata, new_versions)
        changed = {k: str(v) for k, v in new_versions.items() if k in blobs}
        bases = {
            channel: self.lineage.base_for((thread_id, checkpoint_ns, channel), parent_id)
            for channel in checkpoint_delta.DELTA_CHANNELS
        }
        rows, written = await _dump(
            _small(blobs[k] for k in changed if k in blobs),
            self._dump_changed,
            thread_id,
            checkpoint_ns,
            checkpoint["id"],
            blobs,
            changed,
            bases,
        )
        checkpoint_row = (
            thread_id,
            checkpoint_ns,
            checkpoint["id"],
            parent_id,
            Jsonb(row),
            Jsonb(get_serializable_checkpoint_metadata(config, metadata)),
        )
        fallback = [
            (INSERT_BLOB_SQL, self.UPSERT_CHECKPOINT_BLOBS_SQL, rows),
            (UPSERT_CHECKPOINT_SQL, self.UPSERT_CHECKPOINTS_SQL, [checkpoint_row]),
        ]
        await self._write(
            (PUT_CHECKPOINT_SQL, put_checkpoint_params(rows, checkpoint_row)), fallback
        )
        self._remember(thread_id, checkpoint_ns, parent_id, checkpoint["id"], written)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Upstream's ``aput_writes``, its plain inserts without a speculative insertion, in one
        statement."""
        if all(w[0] in WRITES_IDX_MAP for w in writes):  # upstream's upsert: rare, kept as is
            await super().aput_writes(config, writes, task_id, task_path)
            return
        configurable = config["configurable"]
        params = await _dump(
            _small(value for _, value in writes),
            self._dump_writes,
            configurable["thread_id"],
            configurable["checkpoint_ns"],
            configurable["checkpoint_id"],
            task_id,
            task_path,
            writes,
        )
        if not params:
            return
        await self._write(
            (PUT_WRITES_SQL, put_writes_params(params)),
            [(INSERT_WRITE_SQL, self.INSERT_CHECKPOINT_WRITES_SQL, params)],
        )

    #: Send a statement per row in a pipeline instead of one statement (app/db/checkpoint_sql.py;
    #: for ``benchmarks/checkpoint_writes.py``'s side-by-side).
    row_statements: bool = False

    async def _write(
        self,
        statement: tuple[str, dict[str, Any]],
        rows: Sequence[tuple[str, str, Sequence[Sequence[Any]]]],
    ) -> None:
        """``statement`` (one, atomic), or with ``row_statements`` ``rows``' statements (``(per-row
        statement, upstream's statement, rows)``) in one pipeline (one implicit transaction); on
        a unique violation (a concurrent writer of the same key) all again with upstream's ``ON
        CONFLICT`` statements."""
        try:
            if not self.row_statements:
                async with self._cursor() as cur:
                    await cur.execute(*statement)
                return
            await self._in_pipeline((sql, values) for sql, _, values in rows)
        except UniqueViolation:
            await self._in_pipeline((upstream, values) for _, upstream, values in rows)

    async def _in_pipeline(self, statements: Iterable[tuple[str, Sequence[Sequence[Any]]]]) -> None:
        """Each ``(statement, rows)`` with rows sent a row at a time, in one pipeline."""
        async with self._cursor(pipeline=True) as cur:
            for sql, values in statements:
                if values:
                    await cur.executemany(sql, values)

    def _dump_changed(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        blobs: dict[str, Any],
        changed: dict[str, str],
        bases: dict[str, checkpoint_delta.Written | None],
    ) -> tuple[list[tuple[Any, ...]], dict[str, checkpoint_delta.Written]]:
        """The blob rows of the changed channels, and what the delta-stored ones now hold
        (``bases``: what each delta-stored channel may build on, from the lineage)."""
        rows: list[tuple[Any, ...]] = []
        written: dict[str, checkpoint_delta.Written] = {}
        for channel, version in changed.items():
            value = blobs.get(channel)
            if channel in checkpoint_delta.DELTA_CHANNELS and isinstance(value, list):
                digests = checkpoint_delta.item_digests(checkpoint_codec.plain(self.serde), value)
                kind, data, depth = checkpoint_delta.dump_list(
                    self.serde, value, digests, bases[channel]
                )
                written[channel] = checkpoint_delta.Written(checkpoint_id, version, digests, depth)
                rows.append((thread_id, checkpoint_ns, channel, version, kind, data))
            elif channel in blobs:
                rows.append(
                    (thread_id, checkpoint_ns, channel, version, *self.serde.dumps_typed(value))
                )
            else:
                rows.append((thread_id, checkpoint_ns, channel, version, "empty", None))
        return rows, written

    def _remember(
        self,
        thread_id: str,
        checkpoint_ns: str,
        parent_id: str | None,
        checkpoint_id: str,
        written: dict[str, checkpoint_delta.Written],
    ) -> None:
        """After a successful write only: the next checkpoint may build on this one."""
        for channel in checkpoint_delta.DELTA_CHANNELS:
            key = (thread_id, checkpoint_ns, channel)
            if channel in written:
                self.lineage.record(key, written[channel])
            else:
                self.lineage.carry(key, parent_id, checkpoint_id)

    async def adelete_thread(self, thread_id: str) -> None:
        self.lineage.forget_thread(str(thread_id))
        await super().adelete_thread(thread_id)

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
                if await keep_latest(cur, thread_id):
                    continue
                if await has_deltas(cur, thread_id):
                    log.warning("checkpoint_prune_skipped", thread_id=thread_id, reason="deltas")
                    continue
                general.append(thread_id)
        if general:
            await super().aprune(general, strategy=strategy)

    async def aprune_turns(self, thread_ids: Sequence[str]) -> None:
        """Keep what a client branches from (turn boundaries, branch heads) and prune the steps
        in between, one statement per thread (app/db/checkpoint_prune.py); a thread that
        statement does not cover (another namespace, old checkpoints) keeps its latest only, as
        before (upstream's prune, unless it has delta chains)."""
        general = []
        for thread_id in map(str, thread_ids):
            async with self._cursor() as cur:
                if await keep_turns(cur, thread_id):
                    continue
                if await has_deltas(cur, thread_id):
                    log.warning("checkpoint_prune_skipped", thread_id=thread_id, reason="deltas")
                    continue
                general.append(thread_id)
        if general:
            await super().aprune(general, strategy="keep_latest")


#: Serialized on the event loop when the values hold at most this many items and characters of
#: message content: a hop to a thread costs ~50 us of CPU (plus GIL handoffs), more than dumping
#: a short step's values; larger ones still go to a thread, so the loop keeps serving other runs.
INLINE_DUMP_ITEMS = 64
INLINE_DUMP_CHARS = 32_000


def _small(values: Iterable[Any]) -> bool:
    """Whether ``values`` (channel values, lists counted per item) are cheap to serialize."""
    items = chars = 0
    for value in values:
        seq = value if isinstance(value, list) else (value,)
        items += len(seq)
        if items > INLINE_DUMP_ITEMS:
            return False
        for item in seq:
            content = getattr(item, "content", item)
            if isinstance(content, (str, bytes)):
                chars += len(content)
            elif content is not None and not isinstance(content, (int, float, bool)):
                chars += len(repr(content))
        if chars > INLINE_DUMP_CHARS:
            return False
    return True


async def _dump(small: bool, func: Callable[..., _T], *args: Any) -> _T:
    """``func(*args)`` on the loop when ``small``, else in a thread."""
    if small:
        return func(*args)
    return await asyncio.to_thread(func, *args)


def _inline(value: Any) -> bool:
    """Stored in the checkpoint row itself, as upstream does (primitives and None)."""
    return value is None or isinstance(value, (str, int, float, bool))


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
