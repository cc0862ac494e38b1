"""A checkpoint saver on its own psycopg pool, configured as the service's (autocommit, no
prepared statements, dict rows), for the checkpoint tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from app.db.checkpointer import BoundedPostgresSaver
from app.db.urls import libpq_url


@asynccontextmanager
async def saver_on_pool(
    url: str,
    cls: type[AsyncPostgresSaver] = BoundedPostgresSaver,
    *,
    setup: bool = True,
    max_size: int = 4,
    acquire_timeout: float = 5,
) -> AsyncIterator[Any]:
    """A ``cls`` saver (ours unless told) on a new pool of ``url``; its tables set up unless
    ``setup`` is False. The pool is ``saver.conn``."""
    async with AsyncConnectionPool(
        libpq_url(url),
        min_size=1,
        max_size=max_size,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        open=False,
    ) as pool:
        if cls is BoundedPostgresSaver:
            saver: AsyncPostgresSaver = BoundedPostgresSaver(pool, acquire_timeout=acquire_timeout)
        else:
            saver = cls(pool)  # type: ignore[arg-type]
        if setup:
            await saver.setup()
        yield saver
