"""ReadWorkdirFile on both Workdir backends: streamed, hash headers, tampering never served."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import httpx
import pytest

from tests.support.api import new_thread
from tests.support.app_harness import AUTH, AppFactory
from tests.support.live_server import serve_in_loop
from tests.support.workdir_tamper import bucket_of, tamper

pytestmark = pytest.mark.integration


async def test_read_streams_the_original_and_refuses_a_tampered_one(
    app_factory: AppFactory, workdir_settings: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    async with app_factory(start_worker=False, **workdir_settings) as h:
        tid = await new_thread(h)
        text = "".join(f"result line {i}: Zürich\n" for i in range(20000))  # several chunks
        record = await h.container.workdir.write_tool_result(tid, "call_x", text)
        url = f"/v1/threads/{tid}/workdir/{record.path}"
        ok = await h.client.get(url, headers=AUTH)
        assert ok.status_code == 200
        assert ok.text == text
        assert ok.headers["content-type"] == "text/plain; charset=utf-8"
        assert ok.headers["etag"] == f'"sha256-{record.sha256}"'
        digest = base64.b64encode(hashlib.sha256(ok.content).digest()).decode()
        assert ok.headers["repr-digest"] == f"sha-256=:{digest}:"  # RFC 9530
        assert "digest" not in ok.headers
        assert int(ok.headers["content-length"]) == record.bytes

        s3 = request.getfixturevalue("s3_server") if workdir_settings else None
        tamper(h.container.workdir, record, s3, bucket_of(workdir_settings))
        # Headers are out before the mismatch shows: over real HTTP the body is cut short.
        async with (
            serve_in_loop(h.app) as base_url,
            httpx.AsyncClient(base_url=base_url, headers=AUTH) as client,
        ):
            with pytest.raises(httpx.RemoteProtocolError):
                await client.get(url)
