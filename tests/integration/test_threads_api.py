"""Threads API against real PostgreSQL: CRUD, ownership, pagination, auth and bad input."""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import AUTH, OTHER_AUTH, AppFactory

pytestmark = pytest.mark.integration


async def test_create_get_list_delete(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        resp = await h.client.post("/v1/threads", json={"title": "first"}, headers=AUTH)
        assert resp.status_code == 201, resp.text
        thread = resp.json()
        assert thread["title"] == "first" and thread["agent_id"] == "default"
        uuid.UUID(thread["id"])

        got = await h.client.get(f"/v1/threads/{thread['id']}", headers=AUTH)
        assert got.status_code == 200 and got.json()["id"] == thread["id"]

        listed = await h.client.get("/v1/threads", headers=AUTH)
        assert [t["id"] for t in listed.json()["items"]] == [thread["id"]]

        deleted = await h.client.delete(f"/v1/threads/{thread['id']}", headers=AUTH)
        assert deleted.status_code == 204
        gone = await h.client.get(f"/v1/threads/{thread['id']}", headers=AUTH)
        assert gone.status_code == 404 and gone.json()["error"] == "not_found"


async def test_other_owner_sees_404_everywhere(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        tid = (await h.client.post("/v1/threads", json={}, headers=AUTH)).json()["id"]
        for method, path, body in [
            ("GET", f"/v1/threads/{tid}", None),
            ("DELETE", f"/v1/threads/{tid}", None),
            ("GET", f"/v1/threads/{tid}/messages", None),
            ("POST", f"/v1/threads/{tid}/messages", {"content": "hi"}),
            ("GET", f"/v1/threads/{tid}/runs", None),
            ("GET", f"/v1/threads/{tid}/agent-state", None),
            ("POST", f"/v1/threads/{tid}/context/compress", None),
        ]:
            resp = await h.client.request(method, path, json=body, headers=OTHER_AUTH)
            assert resp.status_code == 404, (method, path, resp.text)
            assert resp.json()["error"] == "not_found"
        assert (await h.client.get("/v1/threads", headers=OTHER_AUTH)).json()["items"] == []
        # Bob's failed attempts changed nothing for Alice.
        assert (await h.client.get(f"/v1/threads/{tid}/messages", headers=AUTH)).json()[
            "items"
        ] == []


async def test_pagination_is_stable_and_complete(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        created = [
            (await h.client.post("/v1/threads", json={"title": f"t{i}"}, headers=AUTH)).json()["id"]
            for i in range(7)
        ]
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
            page = (await h.client.get("/v1/threads", params=params, headers=AUTH)).json()
            seen += [t["id"] for t in page["items"]]
            pages += 1
            cursor = page["next_cursor"]
            if not cursor:
                break
        assert pages == 3
        assert sorted(seen) == sorted(created) and len(set(seen)) == 7
        assert seen == list(reversed(created))  # newest first


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": "Basic dGVzdDp0ZXN0"},
        {"Authorization": "Bearer "},
    ],
)
async def test_auth_required(app_factory: AppFactory, headers: dict[str, str]) -> None:
    async with app_factory(start_worker=False) as h:
        resp = await h.client.get("/v1/threads", headers=headers)
        assert resp.status_code == 401
        if headers.get("Authorization") == "Bearer wrong":  # sent and refused (RFC 6750 3.1)
            assert resp.json()["error"] == "invalid_token"
            assert resp.headers["www-authenticate"] == 'Bearer error="invalid_token"'
        else:
            assert resp.json()["error"] == "unauthorized"
            assert resp.headers["www-authenticate"] == "Bearer"


async def test_bad_input_gets_stable_codes(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False, max_request_bytes=2048) as h:
        bad_json = await h.client.post(
            "/v1/threads",
            content=b"{not json",
            headers={**AUTH, "content-type": "application/json"},
        )
        assert bad_json.status_code == 400 and bad_json.json()["error"] == "validation_error"

        unknown = await h.client.post(
            "/v1/threads", json={"title": "x", "colour": "red"}, headers=AUTH
        )
        assert unknown.status_code == 400 and unknown.json()["error"] == "validation_error"

        too_long = await h.client.post("/v1/threads", json={"title": "x" * 501}, headers=AUTH)
        assert too_long.status_code == 400

        bad_uuid = await h.client.get("/v1/threads/not-a-uuid", headers=AUTH)
        assert bad_uuid.status_code in (400, 404) and "error" in bad_uuid.json()

        tid = (await h.client.post("/v1/threads", json={}, headers=AUTH)).json()["id"]
        huge = await h.client.post(
            f"/v1/threads/{tid}/messages", json={"content": "x" * 5000}, headers=AUTH
        )
        assert huge.status_code == 413 and huge.json()["error"] == "payload_too_large"
        blank = await h.client.post(
            f"/v1/threads/{tid}/messages", json={"content": "   "}, headers=AUTH
        )
        assert blank.status_code == 400
        bad_cursor = await h.client.get("/v1/threads", params={"cursor": "!!"}, headers=AUTH)
        assert bad_cursor.status_code == 400 and bad_cursor.json()["error"] == "validation_error"
        # Nothing half-written: no message or request was stored by the rejected posts.
        msgs = (await h.client.get(f"/v1/threads/{tid}/messages", headers=AUTH)).json()["items"]
        assert msgs == []
        runs = (await h.client.get(f"/v1/threads/{tid}/runs", headers=AUTH)).json()["items"]
        assert runs == []


async def test_health_and_ready(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        assert (await h.client.get("/health")).json() == {"status": "ok", "detail": ""}
        ready = await h.client.get("/ready")
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
        assert ready.headers.get("x-request-id")


async def test_openapi_has_operation_ids_and_error_specs(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        doc = (await h.client.get("/schema/openapi.json")).json()
        ops = {
            op["operationId"]: op
            for item in doc["paths"].values()
            for op in item.values()
            if isinstance(op, dict) and "operationId" in op
        }
        for name in [
            "CreateThread",
            "ListThreads",
            "GetThread",
            "DeleteThread",
            "PostMessage",
            "ListMessages",
            "ListRuns",
            "GetRun",
            "StreamRunEvents",
            "ResumeRun",
            "CancelRun",
            "GetAgentState",
            "CompressContext",
            "ReadWorkdirFile",
            "AddDocument",
            "SearchKnowledgeBase",
        ]:
            assert name in ops, name
        assert {"409", "422"} <= set(ops["CompressContext"]["responses"])
        assert "404" in ops["GetThread"]["responses"]


async def test_text_postgres_cannot_store_is_a_client_error(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        bad = await h.client.post("/v1/threads", json={"title": "a\u0000b"}, headers=AUTH)
        assert bad.status_code == 400 and bad.json()["error"] == "validation_error"
        tid = (await h.client.post("/v1/threads", json={}, headers=AUTH)).json()["id"]
        msg = await h.client.post(
            f"/v1/threads/{tid}/messages", json={"content": "x\u0000y"}, headers=AUTH
        )
        assert msg.status_code == 400 and msg.json()["error"] == "validation_error"
        # Rolled back whole: no message, no queued request.
        assert (await h.client.get(f"/v1/threads/{tid}/messages", headers=AUTH)).json()[
            "items"
        ] == []
        long_path = await h.client.get(f"/v1/threads/{tid}/workdir/{'a' * 5000}", headers=AUTH)
        assert long_path.status_code == 400


async def test_post_waits_for_the_row_lock_then_refuses_and_writes_nothing(
    app_factory: AppFactory, clean_db: str
) -> None:
    """Intake's single statement still honours THREADKEEPER_LOCK_TIMEOUT_MS on the thread row
    (held here by another transaction, as compress would): 409 thread_busy, nothing stored; once
    the lock is gone the same post is accepted with the next sequence numbers."""
    import psycopg

    from app.db.urls import libpq_url

    async with app_factory(start_worker=False, lock_timeout_ms=300) as h:
        tid = (await h.client.post("/v1/threads", json={}, headers=AUTH)).json()["id"]
        first = await h.client.post(
            f"/v1/threads/{tid}/messages", json={"content": "one"}, headers=AUTH
        )
        assert first.status_code == 202, first.text
        holder = psycopg.connect(libpq_url(clean_db))
        try:
            holder.execute("SELECT 1 FROM conversations WHERE id = %s FOR UPDATE", (tid,))
            busy = await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "two"}, headers=AUTH
            )
        finally:
            holder.rollback()
            holder.close()
        assert busy.status_code == 409 and busy.json()["error"] == "thread_busy", busy.text
        with psycopg.connect(libpq_url(clean_db)) as conn:
            stored = conn.execute(
                "SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM agent_run_requests)"
            ).fetchone()
        assert stored == (1, 1)

        again = await h.client.post(
            f"/v1/threads/{tid}/messages", json={"content": "two"}, headers=AUTH
        )
        assert again.status_code == 202, again.text
        history = (await h.client.get(f"/v1/threads/{tid}/messages", headers=AUTH)).json()
        assert [(m["content"], m["seq"]) for m in history["items"]] == [("one", 1), ("two", 2)]
        assert history["items"][1]["request_id"] == again.json()["request_id"]
        with psycopg.connect(libpq_url(clean_db)) as conn:
            seqs = conn.execute(
                "SELECT seq, payload->>'message_id' FROM agent_run_requests ORDER BY seq"
            ).fetchall()
        assert seqs == [(1, first.json()["message_id"]), (2, again.json()["message_id"])]
