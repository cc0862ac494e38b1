"""The hot path's one-statement reads and writes on the driver itself (asyncpg), through the
repositories' pool.

Why: a worker's turn sends about fifteen one-statement writes (its steps, delta flushes, the
claim, the outcome). Through SQLAlchemy each cost ~0.5 ms of CPU (a connection object, an
execution context, the text statement's bind handling, a result wrapper, greenlet hops) where
asyncpg itself needs ~0.03 ms (``benchmarks/driver_path.py``: 0.38 -> 0.20 ms per step write
with the checkout; ``benchmarks/providers.py``: 12% less CPU per provider-path turn). The
statements stay the repositories' ``text()`` (named parameters, compiled once here to asyncpg's
``$n``); the connection is a checkout of the same pool (the same bound, the same ping on
checkout, the same recycling), only the layers in between are skipped. A repository takes
either this or a SQLAlchemy connection (``AnyConnection``).

Behind a transaction pooler the statement runs in a transaction (see ``autocommit``): asyncpg's
prepare and execute are two protocol syncs that must reach the same server connection.
"""

from __future__ import annotations

import asyncio
import re
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from opentelemetry import trace
from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.sql.elements import TextClause
from sqlalchemy.util.concurrency import greenlet_spawn

from app.db.errors import is_connection_error
from app.db.session import behind_transaction_pooler

#: ``(statement, parameters)``: what ``watch_statements`` calls.
Watcher = Callable[[str, tuple[Any, ...]], None]


class Row:
    """A result row read by column name, as a SQLAlchemy ``Row`` is (``row.leased``)."""

    __slots__ = ("_record",)

    def __init__(self, record: asyncpg.Record) -> None:
        self._record = record

    def __getattr__(self, name: str) -> Any:
        try:
            return self._record[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, index: int | str) -> Any:
        return self._record[index]


class Result:
    """The rows of one statement, with the part of SQLAlchemy's ``Result`` the repositories
    use (``one``, ``first``, ``scalar``, ``all``)."""

    __slots__ = ("_records",)

    def __init__(self, records: Sequence[asyncpg.Record]) -> None:
        self._records = records

    def all(self) -> list[Row]:
        return [Row(r) for r in self._records]

    def first(self) -> Row | None:
        return Row(self._records[0]) if self._records else None

    def one(self) -> Row:
        if len(self._records) != 1:
            raise LookupError(f"expected one row, got {len(self._records)}")
        return Row(self._records[0])

    def scalar(self) -> Any:
        return self._records[0][0] if self._records else None


class _Compiled:
    __slots__ = ("label", "names", "sql")

    def __init__(self, statement: TextClause, dialect: Any) -> None:
        compiled = statement.compile(dialect=dialect)
        self.sql: str = compiled.string
        self.names: tuple[str, ...] = tuple(compiled.positiontup or ())
        #: The span name: the statement's leading ``-- what`` comment, else its first word.
        first = self.sql.lstrip().split("\n", 1)[0]
        found = re.match(r"--\s*([^:]+)", first)
        self.label = found.group(1).strip() if found else first.split(" ", 1)[0].upper()


#: Each ``text()`` compiled once (they are module constants).
_COMPILED: weakref.WeakKeyDictionary[TextClause, _Compiled] = weakref.WeakKeyDictionary()
#: Engines whose statements are traced (``trace_statements``), with their tracer.
_TRACERS: weakref.WeakKeyDictionary[Engine, trace.Tracer] = weakref.WeakKeyDictionary()
#: Who watches each engine's driver-path statements (``watch_statements``).
_WATCHERS: weakref.WeakKeyDictionary[Engine, list[Watcher]] = weakref.WeakKeyDictionary()


def watch_statements(engine: AsyncEngine, watcher: Watcher) -> Callable[[], None]:
    """Call ``watcher(statement, parameters)`` before each driver-path statement of ``engine``
    (as SQLAlchemy's ``before_cursor_execute`` gives its own: the ``$n`` text and the values
    in order); returns what stops it. For tests and diagnostics that count what is sent."""
    watchers = _WATCHERS.setdefault(engine.sync_engine, [])
    watchers.append(watcher)
    return lambda: watchers.remove(watcher)


def trace_statements(engine: AsyncEngine, tracer: trace.Tracer) -> None:
    """Give this engine's driver-path statements a span each, like its SQLAlchemy ones
    (app/telemetry.py instruments both)."""
    _TRACERS[engine.sync_engine] = tracer


class DriverConnection:
    """An asyncpg connection of the engine's pool, running ``text()`` statements."""

    def __init__(self, raw: asyncpg.Connection, engine: AsyncEngine) -> None:
        self.raw = raw
        self._dialect = engine.dialect
        self._tracer = _TRACERS.get(engine.sync_engine)
        self._watchers = _WATCHERS.get(engine.sync_engine)

    def _compiled(self, statement: TextClause) -> _Compiled:
        found = _COMPILED.get(statement)
        if found is None:
            found = _COMPILED[statement] = _Compiled(statement, self._dialect)
        return found

    async def execute(
        self, statement: TextClause, parameters: Mapping[str, Any] | None = None
    ) -> Result:
        compiled = self._compiled(statement)
        values = parameters or {}
        args = [values[name] for name in compiled.names]
        if self._watchers:
            for watcher in tuple(self._watchers):
                watcher(compiled.sql, tuple(args))
        if self._tracer is None:
            return Result(await self.raw.fetch(compiled.sql, *args))
        with self._tracer.start_as_current_span(
            compiled.label,
            kind=trace.SpanKind.CLIENT,
            attributes={"db.system": "postgresql", "db.statement": compiled.sql},
        ):
            return Result(await self.raw.fetch(compiled.sql, *args))

    async def scalar(
        self, statement: TextClause, parameters: Mapping[str, Any] | None = None
    ) -> Any:
        return (await self.execute(statement, parameters)).scalar()


#: What a repository's statements run on: a SQLAlchemy connection or session, or the driver's.
AnyConnection = AsyncConnection | AsyncSession | DriverConnection


@asynccontextmanager
async def driver(
    engine: AsyncEngine, *, transaction: bool = False
) -> AsyncIterator[DriverConnection]:
    """A connection of ``engine``'s pool for one-statement reads and writes, each its own
    transaction, or all in one with ``transaction`` (always in one behind a transaction
    pooler). A connection error, or a statement cancelled in flight, discards it instead of
    lending it again, and a connection error the connections opened before it too (as
    SQLAlchemy's own execution does on a disconnect)."""
    fairy = await engine.raw_connection()
    raw: asyncpg.Connection = fairy.driver_connection
    discard: BaseException | None = None
    try:
        # By hand, not ``async with raw.transaction()``: its rollback of a cancelled statement
        # waits for the server to acknowledge the cancel, unbounded while the server is
        # unreachable (a drain would hang on it); a discarded connection needs no rollback.
        tx = raw.transaction() if transaction or behind_transaction_pooler(engine) else None
        if tx is not None:
            await tx.start()
        yield DriverConnection(raw, engine)
        if tx is not None:
            await tx.commit()
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError) or is_connection_error(exc) or raw.is_closed():
            discard = exc
        elif tx is not None:  # an SQL error: the connection is fine once rolled back
            try:
                await tx.rollback()
            except Exception as failed:
                discard = failed
        raise
    finally:
        # One shielded step: a second cancel must not check the connection in while it is
        # being discarded.
        await asyncio.shield(greenlet_spawn(_give_back, engine, fairy, discard))


def _give_back(engine: AsyncEngine, fairy: Any, discard: BaseException | None) -> None:
    """Back to the pool; or discarded (``invalidate`` returns the record without any I/O, to
    reconnect at its next checkout), with every older connection after a connection error."""
    if discard is None:
        fairy.close()
    elif is_connection_error(discard):
        # SQLAlchemy's own reaction to a disconnect (``Connection._handle_dbapi_exception``):
        # connections opened before now are replaced at their next checkout.
        engine.sync_engine.pool._invalidate(
            fairy, discard if isinstance(discard, Exception) else None
        )
    else:
        fairy.invalidate(discard if isinstance(discard, Exception) else None)
