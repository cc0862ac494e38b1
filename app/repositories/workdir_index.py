"""The thread's recall index: one row per offloaded original, inserted once, never rewritten.

Searched like the knowledge base (a GIN-indexed tsvector), but the lexemes are the original's
terms as ``app.compression.terms`` computes them (``array_to_tsvector``, no parser, no stemming of
its own), so the index matches exactly what the passage scorer of ``search_workdir`` matches.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Table, bindparam, delete, func, select, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.types import Text

from app.db.models import WorkdirIndexEntry

#: Longest term kept as a lexeme (PostgreSQL refuses lexemes over 2 KB; longer "words" are
#: blobs such as base64, which nobody searches for by their full spelling).
MAX_TERM_CHARS = 200
#: Bytes of lexemes kept per original (a tsvector is limited to 1 MB).
MAX_TERMS_BYTES = 512 * 1024
#: Rows per multi-row INSERT (one JSON parameter; bounds the statement's size).
INSERT_ROWS = 1000

_T: Table = WorkdirIndexEntry.__table__  # type: ignore[assignment]

#: Candidates whose lexemes hold any query term, by distinct terms held, newest first.
_CANDIDATES = text(
    """
    SELECT e.entry, (
        SELECT count(*) FROM unnest(CAST(:words AS text[])) AS w
        WHERE e.tsv @@ CAST(quote_literal(w) AS tsquery)
    ) AS held
    FROM workdir_index AS e
    WHERE e.thread_key = :thread_key AND e.tsv @@ CAST(:query AS tsquery)
    ORDER BY held DESC, e.id DESC
    LIMIT :limit
    """
).bindparams(bindparam("words", type_=ARRAY(Text)))


#: The rows of a batch as one JSON parameter, inserted in their order (ids ascending, as one
#: INSERT each would number them). One statement text whatever the batch size: compiled once
#: (a VALUES list of N rows is a new statement per N, compiled every time: ~8 ms for 24 rows).
_ADD_MANY = text(
    """
    INSERT INTO workdir_index (thread_key, path, sha256, entry, tsv)
    SELECT :thread_key, r.path, r.sha256, r.entry,
           array_to_tsvector(ARRAY(SELECT jsonb_array_elements_text(r.terms)))
    FROM ROWS FROM (
        jsonb_to_recordset(CAST(:rows AS jsonb))
            AS (path text, sha256 text, entry jsonb, terms jsonb)
    ) WITH ORDINALITY AS r(path, sha256, entry, terms, n)
    ORDER BY r.n
    ON CONFLICT (thread_key, path) DO NOTHING
    RETURNING id
    """
)

#: One row of ``add_many``: (path, sha256, entry, lexemes).
IndexRow = tuple[str, str, dict[str, Any], list[str]]


def lexemes(terms: Iterable[str]) -> list[str]:
    """The terms stored for one original: sorted, each under ``MAX_TERM_CHARS``, capped in
    total at ``MAX_TERMS_BYTES`` (shortest first, so a blob never pushes words out)."""
    kept: list[str] = []
    size = 0
    for term in sorted((t for t in set(terms) if 0 < len(t) <= MAX_TERM_CHARS), key=len):
        size += len(term.encode("utf-8")) + 1
        if size > MAX_TERMS_BYTES:
            break
        kept.append(term)
    return sorted(kept)


def tsquery_any(words: Sequence[str]) -> str:
    """``'a' | 'b'`` with each word quoted as one lexeme (no tsquery syntax gets through)."""
    return " | ".join("'" + w.replace("\\", "\\\\").replace("'", "''") + "'" for w in words)


class WorkdirIndexRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def add(
        self, thread_key: str, path: str, sha256: str, entry: dict[str, Any], terms: list[str]
    ) -> bool:
        """One INSERT; False when the thread already indexes ``path`` (kept as it was)."""
        stmt = (
            pg_insert(_T)
            .values(
                thread_key=thread_key,
                path=path,
                sha256=sha256,
                entry=entry,
                tsv=func.array_to_tsvector(bindparam("terms", terms, type_=ARRAY(Text))),
            )
            .on_conflict_do_nothing(index_elements=["thread_key", "path"])
            .returning(_T.c.id)
        )
        return (await self.session.execute(stmt)).first() is not None

    async def add_many(self, thread_key: str, rows: Sequence[IndexRow]) -> int:
        """One multi-row INSERT (``_ADD_MANY``) per ``INSERT_ROWS`` rows; returns how many were
        new (a path the thread already indexes is kept as it was). The caller's transaction
        holds them all."""
        added = 0
        for start in range(0, len(rows), INSERT_ROWS):
            batch = [
                {"path": path, "sha256": sha256, "entry": entry, "terms": terms}
                for path, sha256, entry, terms in rows[start : start + INSERT_ROWS]
            ]
            result = await self.session.execute(
                _ADD_MANY, {"thread_key": thread_key, "rows": json.dumps(batch)}
            )
            added += len(result.all())
        return added

    async def candidates(
        self, thread_key: str, words: Sequence[str], limit: int
    ) -> list[tuple[dict[str, Any], int]]:
        """(entry, distinct query terms it holds) of the best ``limit`` originals."""
        if not words:
            return []
        rows = await self.session.execute(
            _CANDIDATES,
            {
                "thread_key": thread_key,
                "words": list(words),
                "query": tsquery_any(words),
                "limit": limit,
            },
        )
        return [(dict(entry), int(held)) for entry, held in rows.all()]

    async def entries(self, thread_key: str) -> list[dict[str, Any]]:
        """Every entry of the thread, oldest first (the ``index.jsonl`` listing)."""
        stmt = select(_T.c.entry).where(_T.c.thread_key == thread_key).order_by(_T.c.id)
        return [dict(e) for e in (await self.session.scalars(stmt)).all()]

    async def count(self, thread_key: str) -> int:
        stmt = select(func.count()).select_from(_T).where(_T.c.thread_key == thread_key)
        return int((await self.session.scalar(stmt)) or 0)

    async def delete_thread(self, thread_key: str) -> None:
        await self.session.execute(delete(_T).where(_T.c.thread_key == thread_key))
