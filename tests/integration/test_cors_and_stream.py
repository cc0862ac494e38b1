"""Issue 14 (API): CORS allowlist with key-free preflight; typed SSE payloads and comment
keep-alives."""

from __future__ import annotations

import httpx
import pytest

from app.api.controllers import runs as runs_controller
from tests.support.api import add_doc, new_thread
from tests.support.app_harness import AUTH, AppFactory
from tests.support.live_server import serve_in_loop

pytestmark = pytest.mark.integration

ALLOWED = "https://app.example.com"


def preflight(origin: str, method: str = "POST") -> dict[str, str]:
    return {
        "Origin": origin,
        "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "authorization, content-type, idempotency-key",
    }


async def test_cors_allowlist(app_factory: AppFactory) -> None:
    async with app_factory(
        start_worker=False, cors_origins=f"{ALLOWED}, http://localhost:5173"
    ) as h:
        # Preflight: no key needed, the allowed origin is echoed with the allowed headers.
        ok = await h.client.options("/v1/threads", headers=preflight(ALLOWED))
        assert ok.status_code == 204, ok.text
        assert ok.headers["access-control-allow-origin"] == ALLOWED
        allowed_headers = ok.headers["access-control-allow-headers"].lower()
        assert "authorization" in allowed_headers and "idempotency-key" in allowed_headers
        assert "PATCH" in ok.headers["access-control-allow-methods"]

        refused = await h.client.options("/v1/threads", headers=preflight("https://evil.test"))
        assert refused.status_code == 400
        assert "access-control-allow-origin" not in refused.headers

        # The real request still needs its key; the allowed origin may read the answer.
        anonymous = await h.client.get("/v1/threads", headers={"Origin": ALLOWED})
        assert anonymous.status_code == 401
        listed = await h.client.get("/v1/threads", headers={"Origin": ALLOWED, **AUTH})
        assert listed.status_code == 200
        assert listed.headers["access-control-allow-origin"] == ALLOWED
        assert "x-request-id" in listed.headers["access-control-expose-headers"].lower()
        other = await h.client.get("/v1/threads", headers={"Origin": "https://evil.test", **AUTH})
        assert "access-control-allow-origin" not in other.headers


async def test_without_cors_origins_no_origin_is_allowed(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        resp = await h.client.options("/v1/threads", headers=preflight(ALLOWED))
        # Never a 401 for a preflight, but no CORS grant either: the browser refuses.
        assert resp.status_code == 204, resp.text
        assert "access-control-allow-origin" not in resp.headers
        got = await h.client.get("/v1/threads", headers={"Origin": ALLOWED, **AUTH})
        assert "access-control-allow-origin" not in got.headers


async def test_stream_payloads_are_typed(app_factory: AppFactory) -> None:
    async with app_factory() as h:
        await add_doc(h)
        tid = await new_thread(h)
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "lease?"}, headers=AUTH)
        run = await h.wait_for_run(tid, statuses={"completed", "failed"})
        events = await h.sse_events(run["id"])
        kinds = [e["event"] for e in events]
        assert {"status", "message"} <= set(kinds), kinds
        for e in events:
            assert e["data"]["type"] == e["event"], e  # the payload names its schema
        first, last = events[0]["data"], events[-1]["data"]
        assert first["status"] == "running" and first["request_id"] == run["request_id"]
        assert last == {**last, "status": "completed", "final": True}
        roles = [e["data"]["role"] for e in events if e["event"] == "message"]
        assert roles == ["assistant", "tool", "assistant"]
        # Every field is sent, the running frame's final/error/error_code included.
        assert first == {
            "type": "status",
            "status": "running",
            "final": False,
            "error": None,
            "error_code": None,
            "provider_status": None,
            "provider_code": None,
            "interrupt": None,
            "interrupt_value": None,
            "request_id": run["request_id"],
            "handoff": False,
        }
        # A message event names the stored message (id and seq), not a copy of its content.
        history = (await h.client.get(f"/v1/threads/{tid}/messages", headers=AUTH)).json()
        named = [e["data"] for e in events if e["event"] == "message"]
        assert [set(d) for d in named] == [{"type", "message_id", "seq", "role"}] * 3
        assert [(d["message_id"], d["seq"]) for d in named] == [
            (m["id"], m["seq"]) for m in history["items"][1:]
        ]


async def test_keep_alive_is_a_comment_not_an_event(
    app_factory: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runs_controller, "KEEPALIVE_SECONDS", 0.2)
    async with app_factory(approval_tools="query_kb") as h:
        tid = await new_thread(h)
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "lease?"}, headers=AUTH)
        run = await h.wait_for_run(tid, statuses={"interrupted"})
        # The interrupted run's stream stays open and silent: only keep-alives flow. (A real
        # socket: httpx's ASGI transport would buffer the never-ending body.)
        lines: list[str] = []
        async with (
            serve_in_loop(h.app) as base_url,
            httpx.AsyncClient(base_url=base_url, timeout=60) as client,
            client.stream("GET", f"/v1/runs/{run['id']}/events", headers=AUTH) as r,
        ):
            async for line in r.aiter_lines():
                lines.append(line)
                if line == "" and any(x.startswith(":") for x in lines):
                    break  # the end of the frame that holds the first comment
        comment = next(i for i, x in enumerate(lines) if x.startswith(":"))
        assert lines[comment:] == [": keep-alive", ""], lines  # a comment, not an empty event
        frames = "\n".join(lines[:comment]).split("\n\n")
        assert all("data: {" in f for f in frames if f.strip()), lines
        await h.client.post(f"/v1/runs/{run['id']}/cancel", headers=AUTH)
