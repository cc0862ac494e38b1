"""The thread's recall index behind the Workdir: one entry per offloaded original, added once.

``PgIndex`` (the deployment's, every backend) keeps it in PostgreSQL (``workdir_index``,
``app.repositories.workdir_index``): appended with one INSERT per original (one transaction and
one multi-row INSERT per batch of originals), searched through a GIN index, so neither an offload nor a search reads the thread's history. ``MemoryIndex`` is
the same contract in process memory, for a Workdir built without a database (unit tests, the
offline compression benchmark); it does not survive the process.

Why not a file beside the originals: an S3 object cannot be appended to (the old
``index.jsonl`` was rewritten whole per entry), and a file cannot answer "which originals hold
these terms" without reading all of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.compression.workdir.base import WorkdirError
from app.repositories.workdir_index import IndexRow, WorkdirIndexRepository, lexemes

#: One entry of a batch: (path, sha256, entry, terms).
IndexItem = tuple[str, str, dict[str, Any], set[str]]


class WorkdirIndexError(WorkdirError):
    """The index entry could not be written (the original it names is then not shrunk)."""


class WorkdirIndex(Protocol):
    async def add(
        self, thread_key: str, path: str, sha256: str, entry: dict[str, Any], terms: set[str]
    ) -> None:
        """Append the entry unless the thread already indexes ``path``; raise
        ``WorkdirIndexError`` when it cannot be stored."""

    async def add_many(self, thread_key: str, items: Sequence[IndexItem]) -> None:
        """``add`` for each item, all or none (one transaction): ``WorkdirIndexError`` means
        none of them was stored."""

    async def candidates(
        self, thread_key: str, words: Sequence[str], limit: int
    ) -> list[tuple[dict[str, Any], int]]:
        """(entry, distinct ``words`` the original holds), most held first, then newest."""
        ...

    async def entries(self, thread_key: str) -> list[dict[str, Any]]: ...

    async def count(self, thread_key: str) -> int: ...

    async def delete_thread(self, thread_key: str) -> None: ...


class PgIndex:
    """The index in PostgreSQL, one short transaction per call."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.sessions = sessions

    async def add(
        self, thread_key: str, path: str, sha256: str, entry: dict[str, Any], terms: set[str]
    ) -> None:
        try:
            async with self.sessions() as session, session.begin():
                await WorkdirIndexRepository(session).add(
                    thread_key, path, sha256, entry, lexemes(terms)
                )
        except (SQLAlchemyError, OSError) as exc:
            raise WorkdirIndexError(f"cannot index {path}: {type(exc).__name__}") from exc

    async def add_many(self, thread_key: str, items: Sequence[IndexItem]) -> None:
        if not items:
            return
        rows: list[IndexRow] = [(p, s, e, lexemes(t)) for p, s, e, t in items]
        try:
            async with self.sessions() as session, session.begin():
                await WorkdirIndexRepository(session).add_many(thread_key, rows)
        except (SQLAlchemyError, OSError) as exc:
            raise WorkdirIndexError(
                f"cannot index {len(rows)} originals: {type(exc).__name__}"
            ) from exc

    # Reads let a database error propagate: a lost connection is the worker's to retry.
    async def candidates(
        self, thread_key: str, words: Sequence[str], limit: int
    ) -> list[tuple[dict[str, Any], int]]:
        async with self.sessions() as session:
            return await WorkdirIndexRepository(session).candidates(thread_key, words, limit)

    async def entries(self, thread_key: str) -> list[dict[str, Any]]:
        async with self.sessions() as session:
            return await WorkdirIndexRepository(session).entries(thread_key)

    async def count(self, thread_key: str) -> int:
        async with self.sessions() as session:
            return await WorkdirIndexRepository(session).count(thread_key)

    async def delete_thread(self, thread_key: str) -> None:
        async with self.sessions() as session, session.begin():
            await WorkdirIndexRepository(session).delete_thread(thread_key)


class MemoryIndex:
    """The same contract in a dict (a Workdir without a database). ``for_store``: one per
    backend description in this process, so two Workdirs on one folder share their index."""

    _shared: dict[str, MemoryIndex] = {}

    @classmethod
    def for_store(cls, description: str) -> MemoryIndex:
        return cls._shared.setdefault(description, cls())

    def __init__(self) -> None:
        self._threads: dict[str, dict[str, tuple[dict[str, Any], frozenset[str]]]] = {}

    async def add(
        self, thread_key: str, path: str, sha256: str, entry: dict[str, Any], terms: set[str]
    ) -> None:
        self._threads.setdefault(thread_key, {}).setdefault(
            path, (dict(entry), frozenset(lexemes(terms)))
        )

    async def add_many(self, thread_key: str, items: Sequence[IndexItem]) -> None:
        for path, sha256, entry, terms in items:
            await self.add(thread_key, path, sha256, entry, terms)

    async def candidates(
        self, thread_key: str, words: Sequence[str], limit: int
    ) -> list[tuple[dict[str, Any], int]]:
        rows = list(self._threads.get(thread_key, {}).values())
        held = [
            (entry, len(set(words) & terms), order) for order, (entry, terms) in enumerate(rows)
        ]
        best = sorted((h for h in held if h[1]), key=lambda h: (h[1], h[2]), reverse=True)
        return [(dict(entry), count) for entry, count, _ in best[:limit]]

    async def entries(self, thread_key: str) -> list[dict[str, Any]]:
        return [dict(entry) for entry, _ in self._threads.get(thread_key, {}).values()]

    async def count(self, thread_key: str) -> int:
        return len(self._threads.get(thread_key, {}))

    async def delete_thread(self, thread_key: str) -> None:
        self._threads.pop(thread_key, None)
