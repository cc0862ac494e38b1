"""Knowledge bases: add documents, search (the same search the query_kb tool runs)."""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import Controller, get, post
from litestar.di import NamedDependency
from litestar.params import Parameter
from litestar.status_codes import HTTP_201_CREATED

from app.api.errors import errors
from app.api.schemas import AddDocumentIn, DocumentOut, KbSearchOut
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
