"""Calls on the HTTP API that many tests make (through an ``AppHarness``'s client)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import httpx

from tests.support.app_harness import AUTH, AppHarness
from tests.support.corpus import BIG_DOC, DOC


async def add_doc(
    h: AppHarness, content: str = DOC, title: str = "Operations guide"
) -> dict[str, Any]:
    resp = await h.client.post(
        "/v1/knowledge-bases/default/documents",
        json={
            "title": title,
            "content": content,
            "source": "guide.md",
            "url": "https://docs.example/ops",
        },
        headers=AUTH,
    )
    assert resp.status_code == 201, resp.text
    return resp.json()  # type: ignore[no-any-return]


async def seed_kb(h: AppHarness) -> None:
    """The default knowledge base holds BIG_DOC."""
    resp = await h.client.post(
        "/v1/knowledge-bases/default/documents",
        json={
            "title": "Leases",
            "content": BIG_DOC,
            "source": "leases.md",
            "url": "https://d/leases",
        },
        headers=AUTH,
    )
    assert resp.status_code == 201


async def new_thread(h: AppHarness) -> str:
    resp = await h.client.post("/v1/threads", json={"title": "t"}, headers=AUTH)
    return resp.json()["id"]  # type: ignore[no-any-return]


async def messages(h: AppHarness, tid: str) -> list[dict[str, Any]]:
    resp = await h.client.get(f"/v1/threads/{tid}/messages", headers=AUTH)
    return resp.json()["items"]  # type: ignore[no-any-return]


async def state(h: AppHarness, tid: str) -> dict[str, Any]:
    resp = await h.client.get(f"/v1/threads/{tid}/agent-state", headers=AUTH)
    assert resp.status_code == 200, resp.text
    return resp.json()  # type: ignore[no-any-return]


async def run_turns(h: AppHarness, tid: str, texts: list[str]) -> None:
    """Post each text and wait for its run to complete before the next one."""
    done = set(await h.run_ids(tid))
    for text in texts:
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": text}, headers=AUTH)
        run = await h.wait_for_run(tid, statuses={"completed", "failed"}, exclude=done)
        assert run["status"] == "completed", run["error"]
        done.add(run["id"])


def assert_clean_503(resp: httpx.Response) -> None:
    """The database is unreachable: a JSON 503 that says so and invites a retry, nothing more."""
    assert resp.status_code == 503, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    assert resp.json() == {
        "error": "database_unavailable",
        "detail": "the database is unreachable or the connection was lost; retry the request",
        "fields": None,
    }
    assert resp.headers["retry-after"] == "2"
    assert "Traceback" not in resp.text and "asyncpg" not in resp.text


# --- every operation of the OpenAPI document -------------------------------------------------------
#: A plausible value per path parameter, so the request would otherwise reach the handler.
PARAMS = {
    "thread_id": str(uuid.uuid4()),
    "run_id": str(uuid.uuid4()),
    "request_id": str(uuid.uuid4()),
    "kb": "default",
    "agent_id": "default",
    "document_id": str(uuid.uuid4()),
    "message_id": str(uuid.uuid4()),
}
#: A valid body per operation that takes one.
BODIES: dict[str, Any] = {
    "CreateThread": {"title": "t"},
    "UpdateThread": {"title": "t2"},
    "PostMessage": {"content": "hi"},
    "ResumeRun": {"decisions": [{"type": "approve"}]},
    "AddDocument": {"title": "t", "content": "some text"},
    "EditMessage": {"content": "edited"},
}


def concrete_path(path: str) -> str:
    """The OpenAPI path template with every parameter filled in."""
    path = path.replace("{path}", "tool-results/x.txt")
    return re.sub(r"\{(\w+)\}", lambda m: PARAMS[m.group(1)], path)


async def openapi_operations(h: AppHarness) -> list[tuple[str, str, dict[str, Any]]]:
    """``(METHOD, path template, operation)`` for every operation the served document lists."""
    doc = (await h.client.get("/schema/openapi.json")).json()
    return [
        (method.upper(), path, op)
        for path, item in doc["paths"].items()
        for method, op in item.items()
        if isinstance(op, dict) and "operationId" in op
    ]


async def scrape(h: AppHarness) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of ``/metrics`` (fetched without an API key) by name and labels."""
    from prometheus_client.parser import text_string_to_metric_families

    resp = await h.client.get("/metrics")
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(resp.text)
        for s in family.samples
    }


def value(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    """Sum of the samples named ``name`` whose labels include ``labels`` (0 when absent)."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)
