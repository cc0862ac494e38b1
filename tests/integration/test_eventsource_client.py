"""The `eventsource` npm package (what browsers' EventSource does, in Node) follows a run and
stops by itself after the final event: its reconnect gets 204 instead of an empty 200, on which
it used to reconnect every 3 s forever. Node packages: tests/node/eventsource (npm ci)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import new_thread
from tests.support.app_harness import API_KEY, AUTH, AppFactory
from tests.support.live_server import serve_in_loop

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PACKAGE = Path(__file__).resolve().parents[1] / "node" / "eventsource"


@pytest.fixture(scope="module")
def follower(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The program with its locked packages installed (``npm ci``, from npm's own cache)."""
    npm = shutil.which("npm")
    assert npm, "Node.js and npm are needed for this test"
    work = tmp_path_factory.mktemp("eventsource")
    for name in ("package.json", "package-lock.json", "follow.mjs"):
        shutil.copy(PACKAGE / name, work / name)
    done = subprocess.run(
        [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--prefer-offline"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return work / "follow.mjs"


async def follow(program: Path, *args: str) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        "node", str(program), *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, (proc.returncode, out.decode(), err.decode())
    return json.loads(out.decode().strip().splitlines()[-1])  # type: ignore[no-any-return]


async def test_eventsource_stops_after_the_final_event(
    app_factory: AppFactory, follower: Path
) -> None:
    async with app_factory() as h:
        tid = await new_thread(h)
        posted = await h.client.post(
            f"/v1/threads/{tid}/messages", json={"content": "hello"}, headers=AUTH
        )
        assert posted.status_code == 202
        run = await h.wait_for_run(tid, statuses={"completed"})
        token = (await h.client.post(f"/v1/runs/{run['id']}/stream-token", headers=AUTH)).json()
        async with serve_in_loop(h.app) as base_url:
            events_url = f"{base_url}/v1/runs/{run['id']}/events"
            # As a browser does it (no header: the stream token), and with the key in a header.
            by_token = await follow(follower, f"{events_url}?stream_token={token['token']}")
            by_key = await follow(follower, events_url, API_KEY)
    for seen in (by_token, by_key):
        assert seen["closed"] is True
        events = seen["events"]
        assert events[-1]["final"] is True and events[-1]["type"] == "status"
        assert all(e["event"] == e["type"] for e in events)
        # One stream, then one reconnect from the final event, answered 204: no more.
        assert seen["responses"] == [
            {"status": 200, "lastEventId": None},
            {"status": 204, "lastEventId": events[-1]["id"]},
        ]
