"""ListDocuments and DeleteDocument (issue 19 item 4): paginated like the other lists, per
principal and knowledge base; a delete removes the document and its chunks in one transaction."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import func, literal_column, select

from app.db.models import KbChunk, KbDocument
from app.repositories.knowledge_base import or_tsquery_text
from tests.support.app_harness import AUTH, OTHER_AUTH, AppFactory, AppHarness

pytestmark = pytest.mark.integration
OTHER = OTHER_AUTH


async def add(
    h: AppHarness, kb: str, title: str, content: str, headers: dict[str, str] = AUTH
) -> str:
    resp = await h.client.post(
        f"/v1/knowledge-bases/{kb}/documents",
        json={"title": title, "content": content, "source": f"{title}.md", "chunk_chars": 200},
        headers=headers,
    )
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


async def chunk_count(h: AppHarness, document_id: str) -> int:
    async with h.container.sessions() as session:
        return int(
            await session.scalar(
                select(func.count()).where(KbChunk.document_id == uuid.UUID(document_id))
            )
            or 0
        )


async def test_list_documents_pages_newest_first_per_owner_and_kb(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        ids = [await add(h, "docs", f"doc{i}", f"Paragraph about leases {i}.") for i in range(5)]
        await add(h, "other", "elsewhere", "Not in docs.")
        await add(h, "docs", "bobs", "Bob's own document.", headers=OTHER)

        seen: list[dict[str, object]] = []
        cursor: str | None = None
        pages = 0
        while True:
            params: dict[str, str | int] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
            resp = await h.client.get(
                "/v1/knowledge-bases/docs/documents", params=params, headers=AUTH
            )
            assert resp.status_code == 200, resp.text
            body = resp.json()
            assert len(body["items"]) <= 2
            seen += body["items"]
            pages += 1
            cursor = body["next_cursor"]
            if cursor is None:
                break
        assert pages == 3
        assert [d["id"] for d in seen] == list(reversed(ids))
        first = seen[-1]
        assert first["kb"] == "docs" and first["title"] == "doc0" and first["source"] == "doc0.md"
        assert first["chunks"] == 1 and first["url"] == "" and first["created_at"]

        bob = (await h.client.get("/v1/knowledge-bases/docs/documents", headers=OTHER)).json()
        assert [d["title"] for d in bob["items"]] == ["bobs"]
        empty = await h.client.get("/v1/knowledge-bases/none/documents", headers=AUTH)
        assert empty.json() == {"items": [], "next_cursor": None}

        bad = await h.client.get(
            "/v1/knowledge-bases/docs/documents", params={"cursor": "%%%"}, headers=AUTH
        )
        assert bad.status_code == 400 and bad.json()["error"] == "validation_error"


async def test_delete_document_removes_it_and_its_chunks_from_search(
    app_factory: AppFactory,
) -> None:
    async with app_factory(start_worker=False) as h:
        long_text = "\n\n".join(f"Zebra paragraph {i} about striped horses." * 3 for i in range(6))
        doomed = await add(h, "docs", "zebras", long_text)
        kept = await add(h, "docs", "kept", "Zebra notes that stay.")
        assert await chunk_count(h, doomed) > 1

        resp = await h.client.delete(f"/v1/knowledge-bases/docs/documents/{doomed}", headers=AUTH)
        assert resp.status_code == 204 and resp.content == b""
        assert await chunk_count(h, doomed) == 0
        async with h.container.sessions() as session:
            assert await session.get(KbDocument, uuid.UUID(doomed)) is None
        listed = (await h.client.get("/v1/knowledge-bases/docs/documents", headers=AUTH)).json()
        assert [d["id"] for d in listed["items"]] == [kept]
        hits = (
            await h.client.get(
                "/v1/knowledge-bases/docs/search", params={"q": "zebra"}, headers=AUTH
            )
        ).json()
        assert {r["doc_id"] for r in hits["results"]} == {kept}

        # Unknown, already deleted, another principal's, or in another knowledge base: 404.
        for url, headers in (
            (f"/v1/knowledge-bases/docs/documents/{doomed}", AUTH),
            (f"/v1/knowledge-bases/docs/documents/{uuid.uuid4()}", AUTH),
            (f"/v1/knowledge-bases/docs/documents/{kept}", OTHER),
            (f"/v1/knowledge-bases/other/documents/{kept}", AUTH),
        ):
            resp = await h.client.delete(url, headers=headers)
            assert resp.status_code == 404, (url, resp.text)
            assert resp.json()["error"] == "not_found"
        assert await chunk_count(h, kept) == 1
        malformed = await h.client.delete("/v1/knowledge-bases/docs/documents/nope", headers=AUTH)
        assert malformed.status_code in (400, 404)


async def test_document_operations_declare_their_errors(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        spec = (await h.client.get("/schema/openapi.json")).json()
        docs = spec["paths"]["/v1/knowledge-bases/{kb}/documents"]
        assert docs["get"]["operationId"] == "ListDocuments"
        assert {"400", "401"} <= set(docs["get"]["responses"])
        one = spec["paths"]["/v1/knowledge-bases/{kb}/documents/{document_id}"]["delete"]
        assert one["operationId"] == "DeleteDocument"
        assert {"204", "400", "401", "404"} <= set(one["responses"])


async def _reference_search(
    h: AppHarness, *, kb: str, owner_id: str, query: str, limit: int
) -> list[tuple[int, str, float]]:
    """The search as the ORM session ran it before it became one Core statement."""
    tsq = func.to_tsquery("english", or_tsquery_text(query))
    rank = func.ts_rank_cd(KbChunk.tsv, tsq).label("rank")
    stmt = (
        select(KbChunk, KbDocument, rank)
        .join(KbDocument, KbDocument.id == KbChunk.document_id)
        .where(KbChunk.kb == kb, KbDocument.owner_id == owner_id, KbChunk.tsv.op("@@")(tsq))
        .order_by(literal_column("rank").desc(), KbChunk.id)
        .limit(limit)
    )
    async with h.container.sessions() as session:
        rows = (await session.execute(stmt)).all()
    return [
        (c.id, f"{d.title}|{d.source}|{d.url}|{c.content}", round(float(r), 6)) for c, d, r in rows
    ]


async def test_search_returns_what_the_session_search_returned(app_factory: AppFactory) -> None:
    """SearchKnowledgeBase and the query_kb tool's search (one statement on the driver's
    connection): the same hits, order, scores and payload as the ORM session's search, per
    owner and knowledge base."""
    words = ["lease", "heartbeat", "worker", "claim", "queue", "thread", "stream", "token"]
    async with app_factory(start_worker=False) as h:
        for i in range(12):
            body = "\n\n".join(
                f"The {words[(i + j) % 8]} and the {words[(i * j + 1) % 8]} paragraph {j}."
                for j in range(6)
            )
            await add(h, "docs", f"doc{i}", body)
        await add(h, "other", "elsewhere", "The lease of another knowledge base.")
        await add(h, "docs", "bobs", "Bob's lease and heartbeat.", headers=OTHER)
        for query, limit in [
            ("lease heartbeat", 8),
            ("What about the worker's claim queue?", 5),
            ("stream token thread", 50),
            ("nothing matches zzz", 8),
            ("!!!", 8),
        ]:
            resp = await h.client.get(
                "/v1/knowledge-bases/docs/search", params={"q": query, "limit": limit}, headers=AUTH
            )
            assert resp.status_code == 200, resp.text
            payload = resp.json()
            expected = (
                await _reference_search(h, kb="docs", owner_id="alice", query=query, limit=limit)
                if or_tsquery_text(query)
                else []
            )
            got = [
                (int(r["id"]), f"{r['title']}|{r['source']}|{r['url']}|{r['content']}", r["score"])
                for r in payload["results"]
            ]
            assert got == expected
            assert payload == {
                "query": query,
                "count": len(expected),
                "results": payload["results"],
            }
            if query == "lease heartbeat":
                assert len(expected) == 8  # the limit bites: order and ties matter
                assert all("Bob" not in r["content"] for r in payload["results"])
            # What query_kb serializes for alice's thread: the same payload.
            tool_payload = await h.container.kb.search(
                kb="docs", owner_id="alice", query=query, limit=limit
            )
            assert tool_payload == payload
