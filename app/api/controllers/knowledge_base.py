"""Knowledge bases: add, list and delete documents, search (the same search query_kb runs)."""

from __future__ import annotations

import uuid
from typing import Annotated

import msgspec
from litestar import Controller, delete, get, post
from litestar.di import NamedDependency
from litestar.params import Parameter
from litestar.status_codes import HTTP_201_CREATED, HTTP_204_NO_CONTENT

from app.api.cursors import decode_cursor, encode_cursor
from app.api.errors import errors
from app.api.schemas import AddDocumentIn, DocumentInfo, DocumentOut, DocumentPage, KbSearchOut
from app.domain.errors import NotFound
from app.services.knowledge_base import KnowledgeBaseService

KB_NAME = r"^[A-Za-z0-9_.-]{1,100}$"


class KnowledgeBaseController(Controller):
    path = "/v1/knowledge-bases"
    tags = ["knowledge-bases"]

    @post(
        "/{kb:str}/documents",
        operation_id="AddDocument",
        status_code=HTTP_201_CREATED,
        responses=errors(),
    )
    async def add_document(
        self,
        kb: Annotated[str, Parameter(pattern=KB_NAME)],
        data: AddDocumentIn,
        principal: NamedDependency[str],
        kb_service: NamedDependency[KnowledgeBaseService],
    ) -> DocumentOut:
        added = await kb_service.add_document(
            kb=kb,
            owner_id=principal,
            title=data.title,
            content=data.content,
            source=data.source,
            url=data.url,
            chunk_chars=data.chunk_chars,
        )
        return DocumentOut(id=added.id, kb=added.kb, title=added.title, chunks=added.chunks)

    @get("/{kb:str}/documents", operation_id="ListDocuments", responses=errors())
    async def list_documents(
        self,
        kb: Annotated[str, Parameter(pattern=KB_NAME)],
        principal: NamedDependency[str],
        kb_service: NamedDependency[KnowledgeBaseService],
        limit: Annotated[int, Parameter(ge=1, le=200)] = 50,
        cursor: str | None = None,
    ) -> DocumentPage:
        """The principal's documents in this knowledge base, newest first."""
        before = decode_cursor(cursor) if cursor else None
        rows = await kb_service.list_documents(
            kb=kb, owner_id=principal, limit=limit + 1, before=before
        )
        page = rows[:limit]
        last = page[-1].document if page else None
        next_cursor = (
            encode_cursor(last.created_at, last.id) if len(rows) > limit and last else None
        )
        items = [
            DocumentInfo(
                id=r.document.id,
                kb=r.document.kb,
                title=r.document.title,
                source=r.document.source,
                url=r.document.url,
                chunks=r.chunks,
                created_at=r.document.created_at,
            )
            for r in page
        ]
        return DocumentPage(items=items, next_cursor=next_cursor)

    @delete(
        "/{kb:str}/documents/{document_id:str}",
        operation_id="DeleteDocument",
        status_code=HTTP_204_NO_CONTENT,
        responses=errors(NotFound),
    )
    async def delete_document(
        self,
        kb: Annotated[str, Parameter(pattern=KB_NAME)],
        document_id: uuid.UUID,
        principal: NamedDependency[str],
        kb_service: NamedDependency[KnowledgeBaseService],
    ) -> None:
        """Removes the document and its chunks in one transaction: searches (and query_kb)
        no longer find it. 404 ``not_found`` for a document this principal does not have."""
        await kb_service.delete_document(kb=kb, owner_id=principal, document_id=document_id)

    @get("/{kb:str}/search", operation_id="SearchKnowledgeBase", responses=errors())
    async def search(
        self,
        kb: Annotated[str, Parameter(pattern=KB_NAME)],
        principal: NamedDependency[str],
        kb_service: NamedDependency[KnowledgeBaseService],
        q: Annotated[str, Parameter(min_length=1, max_length=1000)],
        limit: Annotated[int, Parameter(ge=1, le=50)] = 8,
    ) -> KbSearchOut:
        payload = await kb_service.search(kb=kb, owner_id=principal, query=q, limit=limit)
        return msgspec.convert(payload, KbSearchOut)
