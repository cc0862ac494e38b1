"""Issue 22 items 9, 10, 11a: a held run row, hostile metadata JSON and a doubled credential are
each answered with a clear 4xx (never 500), and nothing is written meanwhile."""

from __future__ import annotations

import urllib.parse
from typing import Any

import psycopg
import pytest

from app.db.urls import libpq_url
from tests.support.api import add_doc, new_thread
from tests.support.app_harness import API_KEY, AUTH, OTHER_KEY, AppFactory

pytestmark = pytest.mark.integration


async def test_cancel_and_resume_on_a_held_run_row_answer_thread_busy(
    app_factory: AppFactory, clean_db: str
) -> None:
    """The thread lock is free but the run row is held (as a worker writing the run's messages
    holds it): both routes wait ``lock_timeout`` and answer 409 thread_busy + Retry-After."""
    async with app_factory(approval_tools="query_kb", lock_timeout_ms=300) as h:
        await add_doc(h)
        tid = await new_thread(h)
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "lease?"}, headers=AUTH)
        run = await h.wait_for_run(tid, statuses={"interrupted"})
        resume_body = {"decisions": [{"type": "approve"}]}

        holder = psycopg.connect(libpq_url(clean_db))
        try:
            holder.execute("SELECT 1 FROM agent_runs WHERE id = %s FOR UPDATE", (run["id"],))
            answers = [
                await h.client.post(f"/v1/runs/{run['id']}/cancel", headers=AUTH),
                await h.client.post(f"/v1/runs/{run['id']}/resume", json=resume_body, headers=AUTH),
            ]
        finally:
            holder.rollback()
            holder.close()
        for resp in answers:
            assert resp.status_code == 409, resp.text
            assert resp.json()["error"] == "thread_busy"
            assert resp.headers["retry-after"] == "1"

        # Nothing was half-written: the run is still interrupted and resumes once the row is free.
        still = (await h.client.get(f"/v1/runs/{run['id']}", headers=AUTH)).json()
        assert still["status"] == "interrupted"
        ok = await h.client.post(f"/v1/runs/{run['id']}/resume", json=resume_body, headers=AUTH)
        assert ok.status_code == 200, ok.text
        done = await h.wait_for_run(tid, statuses={"completed", "failed"})
        assert done["status"] == "completed"


@pytest.mark.parametrize(
    "keys",
    [(API_KEY, API_KEY), (API_KEY, OTHER_KEY), (OTHER_KEY, API_KEY), (API_KEY, "wrong")],
)
async def test_two_authorization_headers_are_refused(
    app_factory: AppFactory, keys: tuple[str, str]
) -> None:
    """Whichever order and whether or not both are valid: never "the first one wins"."""
    async with app_factory(start_worker=False) as h:
        headers = [("Authorization", f"Bearer {key}") for key in keys]
        resp = await h.client.get("/v1/threads", headers=headers)
        assert resp.status_code == 400, resp.text
        body = resp.json()
        assert body["error"] == "validation_error"
        assert body["fields"] == [
            {"field": "Authorization", "message": "send exactly one Authorization header"}
        ]
        created = await h.client.post("/v1/threads", json={}, headers=headers)
        assert created.status_code == 400
        assert (await h.client.get("/v1/threads", headers=AUTH)).json()["items"] == []


#: JSON that Python's ``json`` accepts but PostgreSQL's JSONB refuses (or that exhausts recursion).
HOSTILE_METADATA = {
    "nan": '{"k":NaN}',
    "infinity": '{"k":Infinity}',
    "minus_infinity": '{"k":-Infinity}',
    "huge_exponent": '{"k":1e400}',
    "lone_surrogate_value": '{"k":"\\ud83d"}',
    "lone_surrogate_key": '{"\\udc00":1}',
    "nul_escape": '{"k":"a\\u0000b"}',
    "deep": '{"k":' + "[" * 1500 + "]" * 1500 + "}",
    "long_integer": '{"k":' + "9" * 4400 + "}",
}


def _assert_client_error(resp: Any) -> None:
    assert 400 <= resp.status_code < 500, (resp.status_code, resp.text[:300])
    assert resp.json()["error"] == "validation_error", resp.text[:300]


@pytest.mark.parametrize("raw", HOSTILE_METADATA.values(), ids=HOSTILE_METADATA.keys())
async def test_hostile_metadata_json_is_a_400_on_every_route(
    app_factory: AppFactory, raw: str
) -> None:
    async with app_factory(start_worker=False) as h:
        tid = await new_thread(h)
        listed = await h.client.get(
            "/v1/threads?metadata=" + urllib.parse.quote(raw, safe=""), headers=AUTH
        )
        _assert_client_error(listed)
        assert listed.status_code == 400
        assert listed.json()["fields"][0]["field"] == "metadata"

        body = ('{"metadata":' + raw + "}").encode()
        json_headers = {**AUTH, "Content-Type": "application/json"}
        created = await h.client.post("/v1/threads", content=body, headers=json_headers)
        _assert_client_error(created)
        updated = await h.client.patch(f"/v1/threads/{tid}", content=body, headers=json_headers)
        _assert_client_error(updated)

        # Nothing was written: one thread, its metadata untouched.
        page = (await h.client.get("/v1/threads", headers=AUTH)).json()["items"]
        assert [(t["id"], t["metadata"]) for t in page] == [(tid, {})]


async def test_metadata_filter_still_matches_after_the_stricter_decoding(
    app_factory: AppFactory,
) -> None:
    async with app_factory(start_worker=False) as h:
        meta = {"project": "apollo", "n": 1e300, "deep": [[[{"x": "é"}]]]}
        made = await h.client.post("/v1/threads", json={"metadata": meta}, headers=AUTH)
        assert made.status_code == 201, made.text
        await h.client.post("/v1/threads", json={"metadata": {"project": "gemini"}}, headers=AUTH)
        query = urllib.parse.quote('{"project":"apollo","deep":[[[{"x":"\\u00e9"}]]]}', safe="")
        found = (await h.client.get(f"/v1/threads?metadata={query}", headers=AUTH)).json()
        assert [t["id"] for t in found["items"]] == [made.json()["id"]]
