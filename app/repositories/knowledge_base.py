"""Knowledge base: documents split into chunks, searched with PostgreSQL full-text search."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, literal_column, select
from sqlalchemy.ext.asyncio import AsyncSession

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

    async def search(self, *, kb: str, owner_id: str, query: str, limit: int) -> list[KbHit]:
        text_query = or_tsquery_text(query)
        if not text_query:
            return []
        tsq = func.to_tsquery("english", text_query)
        rank = func.ts_rank_cd(KbChunk.tsv, tsq).label("rank")
        stmt = (
            select(KbChunk, KbDocument, rank)
            .join(KbDocument, KbDocument.id == KbChunk.document_id)
            .where(
                KbChunk.kb == kb,
                KbDocument.owner_id == owner_id,
                KbChunk.tsv.op("@@")(tsq),
            )
            .order_by(literal_column("rank").desc(), KbChunk.id)
            .limit(limit)
        )
        rows = (await self.session.execute(stmt)).all()
        return [
            KbHit(
                chunk_id=chunk.id,
                document_id=doc.id,
                chunk_index=chunk.chunk_index,
                title=doc.title,
                source=doc.source,
                url=doc.url,
                content=chunk.content,
                score=round(float(r), 6),
            )
            for chunk, doc, r in rows
        ]
