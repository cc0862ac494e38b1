"""What an engine sends, whichever way: SQLAlchemy's statements (its ``before_cursor_execute``)
and the driver path's (app/db/driver.py, which the worker's hot path takes)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.driver import watch_statements


@contextlib.contextmanager
def sent_statements(engine: AsyncEngine) -> Iterator[list[tuple[str, Any]]]:
    """Every ``(statement, parameters)`` the engine sends while the block runs, in order."""
    seen: list[tuple[str, Any]] = []

    def record(_c: Any, _cur: Any, statement: str, parameters: Any, _ctx: Any, _m: Any) -> None:
        seen.append((statement, parameters))

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    stop = watch_statements(
        engine, lambda statement, parameters: seen.append((statement, parameters))
    )
    try:
        yield seen
    finally:
        stop()
        event.remove(engine.sync_engine, "before_cursor_execute", record)
