"""Issue 22 item 6: request heads are bounded (``THREADKEEPER_HTTP_MAX_HEAD_BYTES``, 64 KiB).

Over a real socket to the production uvicorn configuration: llhttp has no limit of its own, so
without ours a 64 MB header line from an anonymous client was buffered whole and answered 200.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from tests.support.app_harness import API_KEY, AUTH, AppFactory
from tests.support.live_server import serve_in_loop
from tests.support.raw_http import HANG_GUARD, parse_response, read_until_closed

pytestmark = pytest.mark.integration

LIMIT = 65_536


async def _exchange(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw`` (small enough for the server to read whole) and read until it closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    answer = await read_until_closed(reader)
    writer.close()
    return parse_response(answer)


def _assert_431(status: int, headers: dict[str, str], body: bytes) -> None:
    assert status == 431, (status, body[:200])
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close"
    assert json.loads(body) == {
        "error": "request_header_too_large",
        "detail": f"request head larger than {LIMIT} bytes",
        "fields": None,
    }


async def test_oversized_heads_get_431_and_are_closed(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h, serve_in_loop(h.app) as base_url:
        port = int(base_url.rsplit(":", 1)[1])
        # One long header line, with no API key: the limit needs no authentication.
        huge_line = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (LIMIT + 10)
        _assert_431(*await _exchange(port, huge_line + b"\r\n\r\n"))
        # ...still arriving (no end of head yet): refused without waiting for the rest.
        _assert_431(*await _exchange(port, huge_line))
        # Many small headers adding up.
        many = b"".join(b"X-H%d: %s\r\n" % (i, b"b" * 100) for i in range(LIMIT // 100))
        _assert_431(*await _exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n"))
        # A long request line.
        _assert_431(*await _exchange(port, b"GET /health?q=" + b"c" * LIMIT + b" HTTP/1.1\r\n"))

        # The 64 MB header line of the report: the server hangs up long before it is sent.
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
        total, sent, chunk = 64 * 1024 * 1024, 0, b"d" * 65_536
        with contextlib.suppress(ConnectionError):
            async with asyncio.timeout(HANG_GUARD):
                while sent < total:
                    writer.write(chunk)
                    await writer.drain()
                    sent += len(chunk)
        writer.close()
        assert sent < total, "the server read a 64 MB request head"


async def test_heads_under_the_limit_and_large_bodies_still_work(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h, serve_in_loop(h.app) as base_url:
        port = int(base_url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            # Two requests on one keep-alive connection, each head just under the limit: the
            # count starts again with every request.
            for _ in range(2):
                filler = b"e" * (LIMIT - 200)
                writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Fill: " + filler + b"\r\n\r\n")
                await writer.drain()
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HANG_GUARD)
                status, headers, _ = parse_response(head)
                assert status == 200
                await reader.readexactly(int(headers["content-length"]))

            # A body far larger than the head limit is not a head: it is accepted.
            body = b'{"title": "big body"}' + b" " * (4 * LIMIT)
            writer.write(
                b"POST /v1/threads HTTP/1.1\r\nHost: x\r\n"
                + f"Authorization: Bearer {API_KEY}\r\n".encode()
                + b"Content-Type: application/json\r\n"
                + b"Content-Length: %d\r\n\r\n" % len(body)
                + body
            )
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HANG_GUARD)
            status, headers, _ = parse_response(head)
            created = json.loads(await reader.readexactly(int(headers["content-length"])))
            assert status == 201, created
            assert created["title"] == "big body"
        finally:
            writer.close()
        listed = await h.client.get("/v1/threads", headers=AUTH)
        assert [t["title"] for t in listed.json()["items"]] == ["big body"]


async def test_the_limit_is_a_setting(app_factory: AppFactory) -> None:
    async with (
        app_factory(start_worker=False, http_max_head_bytes=2048) as h,
        serve_in_loop(h.app) as base_url,
    ):
        port = int(base_url.rsplit(":", 1)[1])
        status, _, body = await _exchange(
            port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: " + b"f" * 3000 + b"\r\n\r\n"
        )
        assert status == 431 and json.loads(body)["detail"] == "request head larger than 2048 bytes"
