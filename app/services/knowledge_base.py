"""Knowledge-base ingestion and search (the same search the query_kb tool runs: the container
hands ``KnowledgeBaseService.search`` to the agent's tools)."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db.driver import driver
from app.domain.errors import NotFound
from app.repositories.knowledge_base import (
    KbDocumentRow,
    KbHit,
    KnowledgeBaseRepository,
    KnowledgeBaseSearch,
)

_PARAGRAPH = re.compile(r"\n\s*\n")


def split_into_chunks(text: str, max_chars: int) -> list[str]:
    """Paragraph-aware chunks of at most ``max_chars`` (long paragraphs are cut on spaces)."""
    chunks: list[str] = []
    current = ""
    for para in (p.strip() for p in _PARAGRAPH.split(text)):
        if not para:
            continue
        while len(para) > max_chars:
            cut = para.rfind(" ", 0, max_chars)
            cut = cut if cut > max_chars // 2 else max_chars
            pieces = para[:cut].strip()
            if current:
                chunks.append(current)
                current = ""
            chunks.append(pieces)
            para = para[cut:].strip()
        if current and len(current) + 2 + len(para) > max_chars:
            chunks.append(current)
            current = para
        else:
            current = f"{current}\n\n{para}" if current else para
    if current:
        chunks.append(current)
    return chunks


def kb_payload(query: str, hits: list[KbHit]) -> dict[str, Any]:
    """The JSON shape of SearchKnowledgeBase and of the query_kb tool's result."""
    return {
        "query": query,
        "count": len(hits),
        "results": [
            {
                "id": str(h.chunk_id),
                "doc_id": str(h.document_id),
                "source": h.source,
                "title": h.title,
                "url": h.url,
                "score": h.score,
                "content": h.content,
            }
            for h in hits
        ],
    }


@dataclass(frozen=True, slots=True)
class AddedDocument:
    id: uuid.UUID
    kb: str
    title: str
    chunks: int


class KnowledgeBaseService:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], engine: AsyncEngine) -> None:
        self.sessions = sessions
        #: The sessions' engine: a one-statement read needs no ORM session, only a connection.
        self.engine = engine

    async def add_document(
        self,
        *,
        kb: str,
        owner_id: str,
        title: str,
        content: str,
        source: str,
        url: str,
        chunk_chars: int,
    ) -> AddedDocument:
        chunks = split_into_chunks(content, chunk_chars)
        async with self.sessions() as session, session.begin():
            doc = await KnowledgeBaseRepository(session).add_document(
                kb=kb, owner_id=owner_id, title=title, source=source, url=url, chunks=chunks
            )
        return AddedDocument(id=doc.id, kb=kb, title=title, chunks=len(chunks))

    async def search(self, *, kb: str, owner_id: str, query: str, limit: int) -> dict[str, Any]:
        """Best-ranked chunks first, as ``kb_payload``: one statement on the driver's connection
        (app/db/driver.py; the read is its own transaction; every agent turn runs one)."""
        async with driver(self.engine) as conn:
            hits = await KnowledgeBaseSearch(conn).search(
                kb=kb, owner_id=owner_id, query=query, limit=limit
            )
        return kb_payload(query, hits)

    async def list_documents(
        self,
        *,
        kb: str,
        owner_id: str,
        limit: int,
        before: tuple[datetime, uuid.UUID] | None = None,
    ) -> list[KbDocumentRow]:
        """ListDocuments: newest first (one read, no transaction)."""
        async with self.sessions() as session:
            return await KnowledgeBaseRepository(session).list_documents(
                kb=kb, owner_id=owner_id, limit=limit, before=before
            )

    async def delete_document(self, *, kb: str, owner_id: str, document_id: uuid.UUID) -> None:
        """DeleteDocument: the document and all its chunks go in one transaction, or nothing
        does; ``NotFound`` when the owner has no such document in ``kb``."""
        async with self.sessions() as session, session.begin():
            deleted = await KnowledgeBaseRepository(session).delete_document(
                kb=kb, owner_id=owner_id, document_id=document_id
            )
            if not deleted:
                raise NotFound(f"no document {document_id} in knowledge base {kb!r}")
