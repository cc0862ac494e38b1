"""What a database error means, whatever driver or pool raised it: THE table of SQLSTATEs.

Every layer asks here (the HTTP error mapping, the row-lock helper, the worker's retry) instead
of keeping its own list of codes.

Recognising "the database cannot be reached":

Why: the same fault arrives in many shapes (SQLAlchemy's ``DBAPIError`` with an invalidated
connection, a raw ``ConnectionRefusedError`` from asyncpg's connect, ``psycopg.OperationalError``
or ``PoolTimeout`` from the checkpointer's pool, an ``AdminShutdown`` after
``pg_terminate_backend``). The HTTP layer answers all of them 503 ``database_unavailable`` and the
worker retries a run on them, so both need one precise test that does not catch ordinary SQL
errors (constraint violations, lock timeouts) or unrelated ``OSError``s (a full disk).
"""

from __future__ import annotations

import enum
from types import TracebackType

import asyncpg
import psycopg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolExhausted


class Fault(enum.Enum):
    """The kinds of SQL error the service treats specially (anything else is a bug: 500)."""

    #: The connection is gone or cannot be had: 503, and the worker retries the run.
    CONNECTION = "connection"
    #: lock_not_available (NOWAIT / lock_timeout): another operation holds the thread's row lock.
    LOCK_NOT_AVAILABLE = "lock_not_available"
    #: deadlock_detected: PostgreSQL aborted us so another transaction could go through.
    DEADLOCK = "deadlock"
    #: serialization_failure: a concurrent transaction won.
    SERIALIZATION = "serialization"
    #: The text cannot be stored (e.g. a NUL character): the client's data, not our bug.
    UNSTORABLE_TEXT = "unstorable_text"


#: THE SQLSTATE table. Class 08 (connection exceptions) is matched by prefix in ``fault_of``.
SQLSTATES: dict[str, Fault] = {
    "57P01": Fault.CONNECTION,  # admin_shutdown
    "57P02": Fault.CONNECTION,  # crash_shutdown
    "57P03": Fault.CONNECTION,  # cannot_connect_now
    "53300": Fault.CONNECTION,  # too_many_connections
    "55P03": Fault.LOCK_NOT_AVAILABLE,
    "40P01": Fault.DEADLOCK,
    "40001": Fault.SERIALIZATION,
    "22021": Fault.UNSTORABLE_TEXT,  # character_not_in_repertoire
    "22P05": Fault.UNSTORABLE_TEXT,  # untranslatable_character
}
#: "Try again": the thread's lock was not granted in time, or the other transaction went through.
LOCK_FAULTS = frozenset({Fault.LOCK_NOT_AVAILABLE, Fault.DEADLOCK})
RETRYABLE_FAULTS = frozenset({Fault.DEADLOCK, Fault.SERIALIZATION})

_DRIVER_PACKAGES = ("asyncpg", "psycopg", "psycopg_pool", "sqlalchemy")


def _sqlstate(exc: BaseException) -> str | None:
    state = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    return state if isinstance(state, str) else None


def fault_of_sqlstate(state: str | None) -> Fault | None:
    if state is None:
        return None
    if state.startswith("08"):
        return Fault.CONNECTION
    return SQLSTATES.get(state)


def _connection_sqlstate(state: str | None) -> bool:
    return fault_of_sqlstate(state) is Fault.CONNECTION


def sqlstate_of(exc: BaseException) -> str | None:
    """The SQLSTATE of a driver error (app/db/driver.py raises asyncpg's own) or of a
    SQLAlchemy ``DBAPIError`` (from the driver error it wraps, or the one that driver error
    wraps: SQLAlchemy's asyncpg adapter re-raises asyncpg's as its cause)."""
    orig = getattr(exc, "orig", None)
    for candidate in (exc, orig, getattr(orig, "__cause__", None)):
        code = getattr(candidate, "sqlstate", None) or getattr(candidate, "pgcode", None)
        if code:
            return str(code)
    return None


def constraint_of(exc: BaseException) -> str | None:
    """The constraint (or unique index) a SQLAlchemy ``IntegrityError`` violated, if named."""
    orig = getattr(exc, "orig", None)
    for candidate in (orig, getattr(orig, "__cause__", None)):
        name = getattr(candidate, "constraint_name", None)
        if name is None:  # psycopg keeps it in the error's diagnostics
            name = getattr(getattr(candidate, "diag", None), "constraint_name", None)
        if name:
            return str(name)
    return None


def fault_of(exc: BaseException) -> Fault | None:
    """The kind of a database error by its SQLSTATE; None when it is none of ours."""
    return fault_of_sqlstate(sqlstate_of(exc))


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
