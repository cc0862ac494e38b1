"""Translate PostgreSQL lock failures into the domain's ThreadBusy."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from sqlalchemy.exc import DBAPIError

from app.db.errors import LOCK_FAULTS, fault_of
from app.domain.errors import ThreadBusy


@asynccontextmanager
async def lock_errors_as_busy(detail: str) -> AsyncIterator[None]:
    try:
        yield
    except (DBAPIError, asyncpg.PostgresError) as exc:  # SQLAlchemy's, or the driver path's
        if fault_of(exc) in LOCK_FAULTS:
            raise ThreadBusy(detail) from exc
        raise
