"""Issue 20: the official JS SDK (@langchain/langgraph-sdk, locked by tests/js/langgraph_sdk's
package-lock.json and installed with ``npm ci``) drives the core flow against a served app."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from app.agents.middlewares.boundary import SUPERSEDED_CALL
from tests.support.api import add_doc
from tests.support.app_harness import API_KEY, AppFactory
from tests.support.live_server import serve_in_loop

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # npm ci + a Node process

PROGRAM = Path(__file__).resolve().parents[1] / "js" / "langgraph_sdk"


@pytest.fixture(scope="session")
def js_sdk() -> Path:
    """``npm ci`` from the committed lock (npm's own cache makes reruns offline-fast), once per
    lock file: a session fixture runs once per xdist worker, and two ``npm ci`` in one folder at
    once fail (each empties node_modules under the other), so a file lock serializes them and a
    marker inside node_modules (removed by any reinstall) says the lock's packages are there."""
    npm = shutil.which("npm")
    assert npm is not None and shutil.which("node"), "Node.js and npm are needed for this test"
    digest = hashlib.sha256((PROGRAM / "package-lock.json").read_bytes()).hexdigest()[:16]
    marker = PROGRAM / "node_modules" / f".threadkeeper-installed-{digest}"
    guard_path = PROGRAM.parents[1].parent / ".cache" / "js-sdk-install.lock"
    guard_path.parent.mkdir(parents=True, exist_ok=True)
    with open(guard_path, "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if not marker.exists():
            subprocess.run(
                [npm, "ci", "--prefer-offline", "--no-audit", "--no-fund"],
                cwd=PROGRAM,
                check=True,
                capture_output=True,
                timeout=600,
            )
            marker.write_text("ok")
    return PROGRAM


async def test_js_sdk_core_flow(app_factory: AppFactory, js_sdk: Path) -> None:
    async with app_factory() as h, serve_in_loop(h.app) as url:
        await add_doc(h)
        node = shutil.which("node")
        assert node is not None
        proc = await asyncio.create_subprocess_exec(
            node,
            "flow.mjs",
            cwd=js_sdk,
            env={"TK_URL": url, "TK_KEY": API_KEY, "PATH": str(Path(node).parent)},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 180)
        assert proc.returncode == 0, err.decode()
        got = json.loads(out.decode().strip().splitlines()[-1])
    assert got["info_has_version"] and got["assistants"] == ["default"]
    # The SDK read the run id from Content-Location, and the stream named the same run.
    assert got["created_run_id"] == got["run_id"]
    assert got["events"][0] == "metadata" and "values" in got["events"]
    assert "end" not in got["events"] and "error" not in got["events"]
    assert got["tuple_nodes"] and set(got["tuple_nodes"]) <= {"model", "tools"}
    assert got["last_message"]["type"] == "ai" and "lease" in got["last_message"]["content"]
    # joinStream with Last-Event-ID replays exactly the parts after it.
    assert got["rejoined_ids"] == got["later_ids"] and got["later_ids"]
    # ...and, naming no modes, in the run's own (issue 32).
    assert got["rejoined_own_ids"] == got["later_ids"]
    assert got["chosen_metadata"] == {"graph_id": "default", "assistant_id": "default"}
    assert got["state_messages"] >= 2 and got["history_head_matches"]
    # Newest first: the thread created with graphId, then the one whose run chose the agent.
    assert got["found"] == [got["chosen_id"], got["thread_id"]]
    assert got["run_status"] == "success"


async def test_js_sdk_refresh_and_edit_as_agent_chat_ui_sends_them(
    app_factory: AppFactory, js_sdk: Path
) -> None:
    """Issue 36: the JS SDK's Refresh (no input) and Edit from the parent checkpoint of where
    a message first appeared (``time_travel.mjs``)."""
    async with app_factory() as h, serve_in_loop(h.app) as url:
        await add_doc(h)
        node = shutil.which("node")
        assert node is not None
        proc = await asyncio.create_subprocess_exec(
            node,
            "time_travel.mjs",
            cwd=js_sdk,
            env={"TK_URL": url, "TK_KEY": API_KEY, "PATH": str(Path(node).parent)},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 180)
        assert proc.returncode == 0, err.decode()
        got = json.loads(out.decode().strip().splitlines()[-1])
    before, refreshed, edited = got["before"], got["refreshed"], got["edited"]
    upto_q2 = before[: before.index("q2") + 1]
    # Refresh replaced the last answer; Edit replaced q2 and everything after it.
    assert refreshed[: len(upto_q2)] == upto_q2 and refreshed[-1] != before[-1]
    assert before[-1] not in refreshed
    assert edited[: edited.index("q2-edit")] == before[: before.index("q2")]
    assert "q2" not in edited and got["after"] == edited
    assert got["old"] == before  # the replaced branch, read at its checkpoint
    assert got["forks"] == 2  # the branch switcher's two fork points


async def test_js_sdk_new_message_supersedes_a_pending_approval(
    app_factory: AppFactory, js_sdk: Path
) -> None:
    """Issue 32 items 5 and 6 (``supersede.mjs``): a plain submit while an approval is pending
    supersedes it; a field Threadkeeper cannot honour is refused by name; cancel with wait."""
    async with app_factory(approval_tools="query_kb") as h, serve_in_loop(h.app) as url:
        await add_doc(h)
        node = shutil.which("node")
        assert node is not None
        proc = await asyncio.create_subprocess_exec(
            node,
            "supersede.mjs",
            cwd=js_sdk,
            env={"TK_URL": url, "TK_KEY": API_KEY, "PATH": str(Path(node).parent)},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 180)
        assert proc.returncode == 0, err.decode()
        got = json.loads(out.decode().strip().splitlines()[-1])
    assert got["first_interrupted"] and got["status_waiting"] == "interrupted"
    kinds = [kind for kind, _ in got["second"]]
    # The waiting call answered as not run, after the new message; its run then asks again.
    assert kinds == ["human", "ai", "human", "tool", "ai"], got["second"]
    assert got["second"][3][1] == SUPERSEDED_CALL
    assert got["second"][2][1] == "How is it renewed?" and got["second_interrupted"]
    # Newest first: the new run (waiting for its own approval), the superseded one.
    assert got["run_statuses"] == ["success", "interrupted"]
    assert got["refused"]["status"] == 422, got["refused"]
    assert "interrupt_before" in json.dumps(got["refused"])
    assert got["after_cancel"] == "idle"
