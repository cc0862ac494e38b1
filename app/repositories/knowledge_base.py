"""Knowledge base: documents split into chunks, searched with PostgreSQL full-text search."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, delete, func, or_, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.driver import AnyConnection
from app.db.models import KbChunk, KbDocument

_WORD = re.compile(r"[A-Za-z0-9]+")


def or_tsquery_text(query: str) -> str:
    """Words joined with ``|`` so any matching term ranks a chunk (the tool answers questions)."""
    words = [w.lower() for w in _WORD.findall(query)][:32]
    return " | ".join(dict.fromkeys(words))


@dataclass(frozen=True, slots=True)
class KbHit:
    chunk_id: int
    document_id: uuid.UUID
    chunk_index: int
    title: str
    source: str
    url: str
    content: str
    score: float


@dataclass(frozen=True, slots=True)
class KbDocumentRow:
    document: KbDocument
    chunks: int


class KnowledgeBaseRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def add_document(
        self,
        *,
        kb: str,
        owner_id: str,
        title: str,
        source: str,
        url: str,
        chunks: Sequence[str],
    ) -> KbDocument:
        doc = KbDocument(
            id=uuid.uuid4(), kb=kb, owner_id=owner_id, title=title, source=source, url=url
        )
        self.session.add(doc)
        await self.session.flush()
        for i, content in enumerate(chunks):
            self.session.add(
                KbChunk(
                    document_id=doc.id,
                    kb=kb,
                    chunk_index=i,
                    content=content,
                    tsv=func.to_tsvector("english", title + "\n" + content),
                )
            )
        await self.session.flush()
        return doc

    async def list_documents(
        self,
        *,
        kb: str,
        owner_id: str,
        limit: int,
        before: tuple[datetime, uuid.UUID] | None = None,
    ) -> list[KbDocumentRow]:
        """The owner's documents of ``kb``, newest first, keyset-paginated on (created_at, id),
        each with its number of chunks."""
        chunks = (
            select(func.count(KbChunk.id))
            .where(KbChunk.document_id == KbDocument.id)
            .scalar_subquery()
        )
        stmt = select(KbDocument, chunks).where(
            KbDocument.kb == kb, KbDocument.owner_id == owner_id
        )
        if before is not None:
            created, document_id = before
            stmt = stmt.where(
                or_(
                    KbDocument.created_at < created,
                    and_(KbDocument.created_at == created, KbDocument.id < document_id),
                )
            )
        stmt = stmt.order_by(KbDocument.created_at.desc(), KbDocument.id.desc()).limit(limit)
        rows = (await self.session.execute(stmt)).all()
        return [KbDocumentRow(document=doc, chunks=int(n)) for doc, n in rows]

    async def delete_document(self, *, kb: str, owner_id: str, document_id: uuid.UUID) -> bool:
        """Delete the document and its chunks (in the caller's transaction); False when the
        owner has no such document in ``kb``."""
        owned = await self.session.scalar(
            select(KbDocument.id)
            .where(
                KbDocument.id == document_id,
                KbDocument.kb == kb,
                KbDocument.owner_id == owner_id,
            )
            .with_for_update()
        )
        if owned is None:
            return False
        await self.session.execute(delete(KbChunk).where(KbChunk.document_id == document_id))
        await self.session.execute(delete(KbDocument).where(KbDocument.id == document_id))
        return True


#: The search: chunks of ``kb`` of the owner's documents matching the ``or`` tsquery, best
#: ``ts_rank_cd`` first (ties: chunk id); only the columns a hit has (not each chunk's tsvector).
SEARCH_SQL = text(
    """-- search the knowledge base
    SELECT c.id, c.document_id, c.chunk_index, d.title, d.source, d.url, c.content,
        ts_rank_cd(c.tsv, to_tsquery('english'::regconfig, :query)) AS rank
    FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id
    WHERE c.kb = :kb AND d.owner_id = :owner_id
        AND c.tsv @@ to_tsquery('english'::regconfig, :query)
    ORDER BY rank DESC, c.id
    LIMIT :limit"""
)


class KnowledgeBaseSearch:
    """The search (SearchKnowledgeBase and the ``query_kb`` tool) as one statement on a bare
    connection (autocommit: the read is its own transaction), the driver's on the hot path: no
    ORM session, no BEGIN and ROLLBACK, no statement built per call."""

    def __init__(self, conn: AnyConnection) -> None:
        self.conn = conn

    async def search(self, *, kb: str, owner_id: str, query: str, limit: int) -> list[KbHit]:
        """Chunks of ``kb`` of the owner's documents matching any word of ``query``, best
        ``ts_rank_cd`` first (ties: chunk id)."""
        text_query = or_tsquery_text(query)
        if not text_query:
            return []
        params = {"query": text_query, "kb": kb, "owner_id": owner_id, "limit": limit}
        rows = (await self.conn.execute(SEARCH_SQL, params)).all()
        return [
            KbHit(
                chunk_id=row.id,
                document_id=row.document_id,
                chunk_index=row.chunk_index,
                title=row.title,
                source=row.source,
                url=row.url,
                content=row.content,
                score=round(float(row.rank), 6),
            )
            for row in rows
        ]
