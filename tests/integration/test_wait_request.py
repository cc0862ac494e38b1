"""WaitRequest: a long-poll until a worker dispatched the request (then its run id) or it was
cancelled, woken by LISTEN/NOTIFY like WaitRun; no client polls GetRequest."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from tests.support.api import new_thread
from tests.support.app_harness import AUTH, OTHER_AUTH, AppFactory, AppHarness

pytestmark = pytest.mark.integration


async def post(h: AppHarness, tid: str) -> str:
    resp = await h.client.post(
        f"/v1/threads/{tid}/messages", json={"content": "hello"}, headers=AUTH
    )
    assert resp.status_code == 202, resp.text
    return str(resp.json()["request_id"])


async def wait_request(h: AppHarness, request_id: str, timeout: float) -> Any:
    resp = await h.client.get(
        f"/v1/requests/{request_id}/wait", params={"timeout": timeout}, headers=AUTH
    )
    assert resp.status_code == 200, resp.text
    return resp.json()


async def test_wait_request_answers_the_run_id_once_dispatched(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        await asyncio.wait_for(h.container.notifier.connected.wait(), 60)
        tid = await new_thread(h)
        request_id = await post(h, tid)
        reads = 0
        read = h.container.feed.request

        async def counted(*args: Any) -> Any:
            nonlocal reads
            reads += 1
            return await read(*args)

        h.container.feed.request = counted  # type: ignore[method-assign]
        # Nobody dispatches it: after the timeout it is still queued, read once (no polling
        # while the listener is up).
        queued = await wait_request(h, request_id, 1)
        assert (queued["status"], queued["run_id"], reads) == ("queued", None, 1)
        # A waiter already waiting when a worker takes the request gets the run at once.
        waiting = asyncio.create_task(wait_request(h, request_id, 30))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        h.container.worker.start()
        got = await waiting
        assert got["status"] == "dispatched" and got["run_id"], got
        assert got["id"] == request_id and got["thread_id"] == tid
        run = (await h.client.get(f"/v1/runs/{got['run_id']}", headers=AUTH)).json()
        assert run["request_id"] == request_id
        # Once dispatched it answers at once; another principal gets 404 as for GetRequest.
        assert (await wait_request(h, request_id, 30))["run_id"] == got["run_id"]
        theirs = await h.client.get(f"/v1/requests/{request_id}/wait", headers=OTHER_AUTH)
        assert theirs.status_code == 404
        missing = await h.client.get(f"/v1/requests/{uuid.uuid4()}/wait", headers=AUTH)
        assert missing.status_code == 404
        assert h.app.state.followers.open_count() == 0


async def test_wait_request_answers_a_cancellation(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        tid = await new_thread(h)
        request_id = await post(h, tid)
        waiting = asyncio.create_task(wait_request(h, request_id, 30))
        await asyncio.sleep(0.2)
        cancel = await h.client.post(f"/v1/requests/{request_id}/cancel", headers=AUTH)
        assert cancel.status_code == 200
        got = await waiting
        assert (got["status"], got["run_id"]) == ("cancelled", None)


async def test_wait_request_counts_towards_the_follower_cap(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False, max_streams_per_principal=1) as h:
        tid = await new_thread(h)
        request_id = await post(h, tid)
        waiting = asyncio.create_task(wait_request(h, request_id, 30))
        await asyncio.sleep(0.2)
        refused = await h.client.get(f"/v1/requests/{request_id}/wait", headers=AUTH)
        assert refused.status_code == 429 and refused.json()["error"] == "too_many_streams"
        assert "retry-after" in refused.headers
        await h.client.post(f"/v1/requests/{request_id}/cancel", headers=AUTH)
        assert (await waiting)["status"] == "cancelled"
