"""Following a run like a browser's EventSource: a stream token instead of the API key, and a
204 (where EventSource clients stop) for a reconnect after the final event."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from app.api.stream_tokens import StreamTokens
from tests.support.api import new_thread
from tests.support.app_harness import AUTH, OTHER_AUTH, AppFactory, AppHarness

pytestmark = pytest.mark.integration


async def finished_run(h: AppHarness) -> dict[str, Any]:
    tid = await new_thread(h)
    posted = await h.client.post(
        f"/v1/threads/{tid}/messages", json={"content": "hi"}, headers=AUTH
    )
    assert posted.status_code == 202, posted.text
    return await h.wait_for_run(tid, statuses={"completed", "failed"})


async def token_for(h: AppHarness, run_id: str) -> str:
    resp = await h.client.post(f"/v1/runs/{run_id}/stream-token", headers=AUTH)
    assert resp.status_code == 200, resp.text
    assert resp.json()["run_id"] == run_id
    return resp.json()["token"]  # type: ignore[no-any-return]


async def test_a_reconnect_after_the_final_event_is_204(app_factory: AppFactory) -> None:
    async with app_factory() as h:
        run = await finished_run(h)
        events = await h.sse_events(run["id"])
        assert events[-1]["data"]["final"] is True
        url = f"/v1/runs/{run['id']}/events"
        again = await h.client.get(url, headers={**AUTH, "Last-Event-ID": events[-1]["id"]})
        assert again.status_code == 204 and again.content == b""
        assert (
            await h.client.get(f"{url}?after={events[-1]['id']}", headers=AUTH)
        ).status_code == 204
        # Before the final event the stream still replays what follows.
        before = await h.client.get(url, headers={**AUTH, "Last-Event-ID": events[-2]["id"]})
        assert before.status_code == 200 and '"final":true' in before.text
        # The follower's place was given back on the 204 (none left open).
        assert h.app.state.followers.open_count() == 0


async def test_a_stream_token_follows_its_run_only(app_factory: AppFactory) -> None:
    async with app_factory() as h:
        run = await finished_run(h)
        other = await finished_run(h)
        token = await token_for(h, run["id"])
        assert "test-key" not in token  # never the API key itself
        url = f"/v1/runs/{run['id']}/events?stream_token={token}"
        resp = await h.client.get(url)  # no Authorization header at all
        assert resp.status_code == 200, resp.text
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert '"final":true' in resp.text
        # Another run, another operation, a forged or truncated token: refused.
        refused = [
            f"/v1/runs/{other['id']}/events?stream_token={token}",
            f"/v1/runs/{run['id']}?stream_token={token}",
            f"/v1/runs/{run['id']}/events?stream_token={token[:-2]}xx",
            f"/v1/runs/{run['id']}/events?stream_token=",
            f"/v1/runs/{run['id']}/events",
        ]
        for bad in refused:
            got = await h.client.get(bad)
            assert got.status_code == 401 and got.json()["error"] == "unauthorized", bad
        # Somebody else's run: no token (404, as for every other operation).
        theirs = await h.client.post(f"/v1/runs/{run['id']}/stream-token", headers=OTHER_AUTH)
        assert theirs.status_code == 404
        missing = await h.client.post(f"/v1/runs/{uuid.uuid4()}/stream-token", headers=AUTH)
        assert missing.status_code == 404


async def test_an_expired_stream_token_is_refused(app_factory: AppFactory) -> None:
    async with app_factory(stream_token_ttl_seconds=60) as h:
        run = await finished_run(h)
        token = await token_for(h, run["id"])
        url = f"/v1/runs/{run['id']}/events?stream_token={token}"
        assert (await h.client.get(url)).status_code == 200
        tokens: StreamTokens = h.app.state.stream_tokens
        real_clock = tokens._clock
        tokens._clock = lambda: real_clock() + 61
        try:
            assert (await h.client.get(url)).status_code == 401
        finally:
            tokens._clock = real_clock


def test_tokens_are_bound_to_the_configured_keys() -> None:
    run = uuid.uuid4()
    issuer = StreamTokens("", {"key-a": "alice"}, 60)
    token, _ = issuer.issue(run, "alice")
    assert issuer.principal_for(token, run) == "alice"
    # Same keys in another process: accepted; rotated keys or a removed principal: refused.
    assert StreamTokens("", {"key-a": "alice"}, 60).principal_for(token, run) == "alice"
    assert StreamTokens("", {"key-b": "alice"}, 60).principal_for(token, run) is None
    assert StreamTokens("s3cret", {"key-a": "alice"}, 60).principal_for(token, run) is None
    with_secret = StreamTokens("s3cret", {"key-a": "alice"}, 60)
    signed, _ = with_secret.issue(run, "alice")
    assert StreamTokens("s3cret", {"key-z": "alice"}, 60).principal_for(signed, run) == "alice"
    assert StreamTokens("s3cret", {"key-z": "bob"}, 60).principal_for(signed, run) is None
