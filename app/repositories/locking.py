"""Translate PostgreSQL lock failures into the domain's ThreadBusy."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.exc import DBAPIError

from app.services.errors import ThreadBusy

#: lock_not_available (NOWAIT / lock_timeout) and deadlock_detected: both mean "try again".
LOCK_SQLSTATES = frozenset({"55P03", "40P01"})


def sqlstate_of(exc: BaseException) -> str | None:
    orig = getattr(exc, "orig", None)
    for candidate in (orig, getattr(orig, "__cause__", None)):
        code = getattr(candidate, "sqlstate", None) or getattr(candidate, "pgcode", None)
        if code:
            return str(code)
    return None


@asynccontextmanager
async def lock_errors_as_busy(detail: str) -> AsyncIterator[None]:
    try:
        yield
    except DBAPIError as exc:
        if sqlstate_of(exc) in LOCK_SQLSTATES:
            raise ThreadBusy(detail) from exc
        raise
