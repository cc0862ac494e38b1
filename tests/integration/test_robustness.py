"""Hostile and malformed input (issue 10): every bad request is a clean 4xx, never a 500, and a
connection that never finishes its request head does not live forever."""

from __future__ import annotations

import asyncio
import json

import pytest

from app.api.json_guard import MAX_JSON_DEPTH
from tests.support.api import BODIES, concrete_path, new_thread, openapi_operations
from tests.support.app_harness import API_KEY, AUTH, AppFactory
from tests.support.live_server import serve_in_loop
from tests.support.raw_http import HANG_GUARD, parse_response, read_until_closed

pytestmark = pytest.mark.integration


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


# --- JSON depth ----------------------------------------------------------------------------------
async def test_deeply_nested_json_is_400_on_every_json_route(app_factory: AppFactory) -> None:
    """~970 levels in 2 KB exhausted the decoder's recursion (500 with a traceback)."""
    async with app_factory(start_worker=False) as h:
        tid = await new_thread(h)
        ops = [op for op in await openapi_operations(h) if "requestBody" in op[2]]
        assert {op[2]["operationId"] for op in ops} >= set(BODIES)
        for method, path, op in ops:
            url = concrete_path(path).replace(concrete_path("{thread_id}"), tid)
            for body in (nested(970), b'{"content": ' + nested(MAX_JSON_DEPTH + 1) + b"}"):
                resp = await h.client.request(
                    method, url, content=body, headers={**AUTH, "content-type": "application/json"}
                )
                assert resp.status_code == 400, (op["operationId"], resp.text)
                assert resp.json()["error"] == "validation_error"
                assert f"deeper than {MAX_JSON_DEPTH}" in resp.json()["detail"]
        # Nothing was written by any of them.
        threads = (await h.client.get("/v1/threads", headers=AUTH)).json()["items"]
        assert [t["id"] for t in threads] == [tid]
        listed = (await h.client.get(f"/v1/threads/{tid}/messages", headers=AUTH)).json()
        assert listed["items"] == []

        # Brackets inside strings nest nothing, and the limit itself is accepted.
        text = "[" * 5000 + "{" * 5000
        ok = await h.client.post(
            f"/v1/threads/{tid}/messages", json={"content": text}, headers=AUTH
        )
        assert ok.status_code == 202, ok.text
        at_limit = b'{"title": "t", "agent_id": ' + nested(MAX_JSON_DEPTH - 1) + b"}"
        resp = await h.client.post(
            "/v1/threads", content=at_limit, headers={**AUTH, "content-type": "application/json"}
        )
        # Decoded (depth within the limit), then refused by the schema: a type error, not depth.
        assert resp.status_code == 400 and "deeper than" not in resp.json()["detail"]


# --- Last-Event-ID -------------------------------------------------------------------------------
async def test_last_event_id_must_be_a_small_ascii_integer(app_factory: AppFactory) -> None:
    async with app_factory() as h:
        tid = await new_thread(h)
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "hi"}, headers=AUTH)
        run = await h.wait_for_run(tid, statuses={"completed"})
        url = f"/v1/runs/{run['id']}/events"
        for bad in [b"\xb2", b"1" * 4300, b"-1", b"+5", b"1.5", b"0x10", "\u0663".encode()]:
            resp = await h.client.get(url, headers={**AUTH, "Last-Event-ID": bad})
            assert resp.status_code == 400, (bad[:20], resp.status_code, resp.text)
            assert resp.json()["error"] == "validation_error"
        events = await h.sse_events(run["id"])
        assert events and events[-1]["data"].get("final") is True
        # A real id still resumes right after it.
        rest = await h.sse_events(run["id"], last_event_id=events[0]["id"])
        assert [e["id"] for e in rest] == [e["id"] for e in events[1:]]


# --- bearer parsing ------------------------------------------------------------------------------
async def test_bearer_header_is_parsed_strictly(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        key = API_KEY.encode()
        for header in [
            b"Bearer " + key + b"\xa0",  # a trailing NBSP used to be stripped away
            b"Bearer  " + key,  # two spaces
            b"Bearer\t" + key,
            b"Bearer " + key + b" ",
            b"Bearer " + key + b" extra",
            b"Bearer:" + key,
        ]:
            resp = await h.client.get("/v1/threads", headers={"Authorization": header})
            assert resp.status_code == 401, (header, resp.status_code)
            assert resp.json()["error"] == "unauthorized"
        # The scheme is case-insensitive (RFC 9110); the token is exact.
        for header in [f"Bearer {API_KEY}", f"bearer {API_KEY}"]:
            resp = await h.client.get("/v1/threads", headers={"Authorization": header})
            assert resp.status_code == 200, header


# --- the HTTP server itself ----------------------------------------------------------------------
async def test_incomplete_request_heads_are_closed_by_the_server(app_factory: AppFactory) -> None:
    async with (
        app_factory(start_worker=False, http_header_timeout_seconds=1.0) as h,
        serve_in_loop(h.app) as base_url,
    ):
        port = int(base_url.rsplit(":", 1)[1])
        # 1. A request head that never ends.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1")
        await writer.drain()
        status, headers, body = parse_response(await read_until_closed(reader))
        writer.close()
        assert status == 408 and headers["content-type"] == "application/json"
        assert json.loads(body)["error"] == "request_timeout"

        # 2. A keep-alive connection: one full request, then a second head that never ends.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HANG_GUARD)
        status, headers, _ = parse_response(head)
        assert status == 200 and "close" not in headers.get("connection", "")
        await reader.readexactly(int(headers["content-length"]))
        writer.write(b"GET /health HTTP/1.1\r\nHost: 1")
        await writer.drain()
        status, _, _ = parse_response(await read_until_closed(reader))
        writer.close()
        assert status == 408

        # 3. A connection that sends nothing at all is not kept either.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        rest = await read_until_closed(reader)
        writer.close()
        assert rest.startswith(b"HTTP/1.1 408")


async def test_malformed_http_gets_the_json_error_shape(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h, serve_in_loop(h.app) as base_url:
        port = int(base_url.rsplit(":", 1)[1])
        for raw in [
            b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n",
            b"GET /he alth HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # TLS to a plain port
        ]:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(raw)
            await writer.drain()
            status, headers, body = parse_response(await read_until_closed(reader))
            writer.close()
            assert status == 400, raw
            assert headers["content-type"] == "application/json", raw
            assert json.loads(body) == {
                "error": "validation_error",
                "detail": "malformed HTTP request",
                "fields": None,
            }
