"""Issue 14 (API): thread metadata (create, UpdateThread, ListThreads filter) and field errors."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from app.db.urls import libpq_url
from tests.support.app_harness import AUTH, OTHER_AUTH, AppFactory, AppHarness

pytestmark = pytest.mark.integration


async def create(h: AppHarness, **body: Any) -> dict[str, Any]:
    resp = await h.client.post("/v1/threads", json=body, headers=AUTH)
    assert resp.status_code == 201, resp.text
    return resp.json()  # type: ignore[no-any-return]


async def listed(h: AppHarness, metadata: Any, headers: dict[str, str] = AUTH) -> list[str]:
    resp = await h.client.get(
        "/v1/threads", params={"metadata": json.dumps(metadata)}, headers=headers
    )
    assert resp.status_code == 200, resp.text
    return [t["title"] for t in resp.json()["items"]]


async def test_metadata_create_patch_and_filter(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        a = await create(h, title="a", metadata={"project": "apollo", "tags": {"tier": 1}})
        await create(h, title="b", metadata={"project": "gemini"})
        await create(h, title="c")
        assert a["metadata"] == {"project": "apollo", "tags": {"tier": 1}}
        assert a["status"] == "idle"

        assert await listed(h, {"project": "apollo"}) == ["a"]
        assert await listed(h, {"tags": {"tier": 1}}) == ["a"]  # nested containment
        assert await listed(h, {"project": "mercury"}) == []
        assert await listed(h, {}) == ["c", "b", "a"]
        assert await listed(h, {"project": "apollo"}, OTHER_AUTH) == []  # owner first

        # PATCH: title only keeps metadata; metadata replaces the whole object.
        renamed = await h.client.patch(f"/v1/threads/{a['id']}", json={"title": "A"}, headers=AUTH)
        assert renamed.status_code == 200, renamed.text
        assert renamed.json()["title"] == "A" and renamed.json()["metadata"] == a["metadata"]
        replaced = await h.client.patch(
            f"/v1/threads/{a['id']}", json={"metadata": {"project": "gemini"}}, headers=AUTH
        )
        assert replaced.json()["metadata"] == {"project": "gemini"}
        assert replaced.json()["title"] == "A"
        assert await listed(h, {"project": "gemini"}) == ["b", "A"]
        got = (await h.client.get(f"/v1/threads/{a['id']}", headers=AUTH)).json()
        assert got["metadata"] == {"project": "gemini"} and got["title"] == "A"

        stranger = await h.client.patch(
            f"/v1/threads/{a['id']}", json={"title": "mine"}, headers=OTHER_AUTH
        )
        assert stranger.status_code == 404


async def test_metadata_and_filter_are_validated(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        t = await create(h, title="t", metadata={"k": "v"})
        for body, field in [
            ({"metadata": {f"k{i}": i for i in range(65)}}, "metadata"),
            ({"metadata": {"": 1}}, "metadata"),
            ({"metadata": {"big": "x" * 17_000}}, "metadata"),
            ({"metadata": ["not", "an", "object"]}, "metadata"),
            ({"title": "x" * 501}, "title"),
            ({"colour": "red"}, "colour"),
        ]:
            resp = await h.client.patch(f"/v1/threads/{t['id']}", json=body, headers=AUTH)
            assert resp.status_code == 400, (body, resp.text)
            err = resp.json()
            assert err["error"] == "validation_error"
            assert [f["field"] for f in err["fields"]] == [field], err
            assert "{'" not in err["detail"], err  # no Python repr
        created = await h.client.post(
            "/v1/threads", json={"metadata": {"big": "x" * 17_000}}, headers=AUTH
        )
        assert created.status_code == 400 and created.json()["fields"][0]["field"] == "metadata"
        # Nothing was half-written.
        assert (await h.client.get(f"/v1/threads/{t['id']}", headers=AUTH)).json()["metadata"] == {
            "k": "v"
        }
        assert len((await h.client.get("/v1/threads", headers=AUTH)).json()["items"]) == 1

        for raw in ["{bad", "[1,2]", '"text"']:
            resp = await h.client.get("/v1/threads", params={"metadata": raw}, headers=AUTH)
            assert resp.status_code == 400, raw
            assert resp.json()["fields"] == [
                {"field": "metadata", "message": "metadata must be a JSON object"}
            ]


async def test_validation_errors_name_each_field(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        tid = (await create(h))["id"]
        empty = await h.client.post(
            f"/v1/threads/{tid}/messages", json={"content": ""}, headers=AUTH
        )
        body = empty.json()
        assert empty.status_code == 400 and body["error"] == "validation_error"
        assert [f["field"] for f in body["fields"]] == ["content"]
        assert "length >= 1" in body["fields"][0]["message"]
        assert "{'" not in body["detail"] and "content" in body["detail"]

        blank = await h.client.post(
            f"/v1/threads/{tid}/messages", json={"content": "   "}, headers=AUTH
        )
        assert blank.json()["fields"] == [
            {"field": "content", "message": "content must not be blank"}
        ]
        missing = await h.client.post(f"/v1/threads/{tid}/messages", json={}, headers=AUTH)
        assert [f["field"] for f in missing.json()["fields"]] == ["content"]
        limit = await h.client.get("/v1/threads?limit=0", headers=AUTH)
        assert [f["field"] for f in limit.json()["fields"]] == ["limit"]
        nested = await h.client.post(
            "/v1/runs/00000000-0000-0000-0000-000000000000/resume",
            json={"decisions": [{"type": "maybe"}]},
            headers=AUTH,
        )
        assert nested.status_code == 400
        assert nested.json()["fields"][0]["field"].startswith("decisions")


async def test_metadata_filter_has_a_gin_index(app_factory: AppFactory, clean_db: str) -> None:
    """The containment filter can use the index the migration creates (jsonb_path_ops)."""
    async with app_factory(start_worker=False):
        with psycopg.connect(libpq_url(clean_db)) as conn:
            row = conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_conversations_metadata'"
            ).fetchone()
    assert row is not None and "gin" in row[0] and "jsonb_path_ops" in row[0]
