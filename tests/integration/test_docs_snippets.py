"""Code blocks of docs/ a reader pastes, run as pasted against a live server (issue 30: the
LangGraph page's Python used a top-level ``await``, and the agents page listed the messages
before the answer could be there). Only the address and the key are swapped for the test
server's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.main import create_app
from tests.conftest import API_KEY, make_settings
from tests.support.live_server import serve_in_thread
from tests.support.processes import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DOCS = ROOT / "docs"
LEASE = "A lease is a run's claim on its thread"


def blocks(page: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", (DOCS / page).read_text(), re.S)


def swapped(code: str, address: str, base_url: str) -> str:
    """The block aimed at the test server (it must name the documented address and key)."""
    assert address in code and "dev-key" in code, code
    return code.replace(address, base_url).replace("dev-key", API_KEY)


def test_the_langgraph_python_snippet_runs_as_pasted(clean_db: str, tmp_path: Path) -> None:
    code = blocks("langgraph.md", "python")[0]
    app = create_app(make_settings(clean_db, tmp_path / "workdir", worker_poll_seconds=0.1))
    with serve_in_thread(app) as base_url:
        script = tmp_path / "example.py"
        script.write_text(swapped(code, "http://127.0.0.1:8000", base_url))
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=180
        )
    assert done.returncode == 0, done.stderr
    events = [line.split(" ", 1)[0] for line in done.stdout.splitlines()]
    assert events[0] == "metadata" and "values" in events, done.stdout
    assert "When does a lease expire?" in done.stdout


def test_the_agents_example_waits_for_the_answer(clean_db: str, tmp_path: Path) -> None:
    [serve, client] = [
        b for b in blocks("agents.md", "bash") if "localhost:8000" in b or "serve" in b
    ][:2]
    assert "THREADKEEPER_AGENTS_FILE=examples/agents.toml" in serve
    settings = make_settings(
        clean_db,
        tmp_path / "workdir",
        worker_poll_seconds=0.1,
        agents_file=str(ROOT / "examples" / "agents.toml"),
    )
    with serve_in_thread(create_app(settings)) as base_url:
        script = swapped(client, "localhost:8000", base_url)
        done = subprocess.run(
            ["bash", "-c", script],
            env=dict(os.environ),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[-2] == "completed", lines
    history = json.loads(lines[-1])["items"]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"], history
    assert LEASE in history[-1]["content"]
