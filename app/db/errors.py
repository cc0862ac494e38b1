"""Recognise "the database cannot be reached" whatever driver or pool raised it.

Why: the same fault arrives in many shapes (SQLAlchemy's ``DBAPIError`` with an invalidated
connection, a raw ``ConnectionRefusedError`` from asyncpg's connect, ``psycopg.OperationalError``
or ``PoolTimeout`` from the checkpointer's pool, an ``AdminShutdown`` after
``pg_terminate_backend``). The HTTP layer answers all of them 503 ``database_unavailable`` and the
worker retries a run on them, so both need one precise test that does not catch ordinary SQL
errors (constraint violations, lock timeouts) or unrelated ``OSError``s (a full disk).
"""

from __future__ import annotations

from types import TracebackType

import asyncpg
import psycopg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolExhausted

#: Connection exceptions (class 08), admin/crash shutdown, cannot connect now, too many connections.
CONNECTION_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53300"})
_DRIVER_PACKAGES = ("asyncpg", "psycopg", "psycopg_pool", "sqlalchemy")


def _sqlstate(exc: BaseException) -> str | None:
    state = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    return state if isinstance(state, str) else None


def _connection_sqlstate(state: str | None) -> bool:
    return state is not None and (state.startswith("08") or state in CONNECTION_SQLSTATES)


def raised_in_modules(tb: TracebackType | None, packages: tuple[str, ...]) -> bool:
    """True if a frame of the traceback runs code of one of ``packages`` (or their modules)."""
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        if any(module == p or module.startswith(p + ".") for p in packages):
            return True
        tb = tb.tb_next
    return False


def _is_connection_error_one(exc: BaseException) -> bool:
    if isinstance(exc, PoolExhausted):
        return True
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
        orig = exc.orig
        return orig is not None and _is_connection_error_one(orig)
    if isinstance(exc, psycopg.OperationalError):
        # No SQLSTATE: a client-side failure (refused, closed, pool timeout); with one, only
        # the connection classes (a lock timeout is an OperationalError too, and not an outage).
        state = exc.sqlstate
        return state is None or _connection_sqlstate(state)
    if _connection_sqlstate(_sqlstate(exc)):
        return True
    if isinstance(exc, asyncpg.exceptions.ConnectionDoesNotExistError):
        return True
    if isinstance(exc, asyncpg.InterfaceError) and "connection is closed" in str(exc):
        return True
    if isinstance(exc, OSError):  # ConnectionError, TimeoutError, socket.gaierror
        # Only socket errors raised inside a database driver (not a Workdir write, not an LLM call).
        return raised_in_modules(exc.__traceback__, _DRIVER_PACKAGES)
    return False


def is_connection_error(exc: BaseException) -> bool:
    """True if ``exc`` (or an exception it wraps) says the database could not be reached."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _is_connection_error_one(current):
            return True
        current = current.__cause__ or current.__context__
    return False
