"""MCP servers as agent tools, against the real example server (examples/mcp_server.py) over
stdio and streamable HTTP; a server that cannot be reached makes only its agent unavailable."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import messages, run_turns
from tests.support.app_harness import AUTH, AppFactory, AppHarness
from tests.support.processes import ROOT, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SERVER = ROOT / "examples" / "mcp_server.py"
LEASE = "A lease is a run's claim on its thread"


def agents_file(tmp_path: Path, *agents: dict[str, Any]) -> str:
    path = tmp_path / "agents.json"
    path.write_text(json.dumps({"agents": list(agents)}))
    return str(path)


def mcp_agent(agent_id: str, server: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": agent_id,
        "model": "offline",
        "tools": ["read_workdir_file"],
        "offline_lookup_tool": "glossary",
        "mcp_servers": [{"name": "glossary", **server}],
    }


@contextlib.contextmanager
def http_server(port: int) -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            assert proc.poll() is None, "the MCP server exited"
            import time

            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


async def ask_glossary(h: AppHarness, agent_id: str) -> str:
    agent = (await h.client.get(f"/v1/agents/{agent_id}", headers=AUTH)).json()
    assert agent["available"] is True, agent
    tools = {t["name"]: t for t in agent["tools"]}
    assert {"glossary", "term_count", "read_workdir_file"} <= set(tools)
    assert tools["glossary"]["parameters"]["properties"]["query"]["type"] == "string"
    resp = await h.client.post("/v1/threads", json={"agent_id": agent_id}, headers=AUTH)
    tid = resp.json()["id"]
    await run_turns(h, tid, ["What is a lease?"])
    history = await messages(h, tid)
    tool_results = [m for m in history if m["role"] == "tool"]
    assert tool_results and LEASE in tool_results[0]["content"]
    return history[-1]["content"]  # type: ignore[no-any-return]


async def test_mcp_tools_over_stdio(app_factory: AppFactory, tmp_path: Path) -> None:
    agent = mcp_agent("stdio", {"command": ["python", str(SERVER)]})
    async with app_factory(agents_file=agents_file(tmp_path, agent)) as h:
        answer = await ask_glossary(h, "stdio")
        assert LEASE in answer, answer


async def test_mcp_tools_over_streamable_http(app_factory: AppFactory, tmp_path: Path) -> None:
    with http_server(free_port()) as url:
        agent = mcp_agent("http", {"url": url})
        async with app_factory(agents_file=agents_file(tmp_path, agent)) as h:
            answer = await ask_glossary(h, "http")
            assert LEASE in answer, answer


async def test_an_unreachable_mcp_server_makes_only_its_agent_unavailable(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    down = mcp_agent("down", {"url": f"http://127.0.0.1:{free_port()}/mcp"})
    fine = {"id": "fine", "model": "offline"}
    async with app_factory(agents_file=agents_file(tmp_path, fine, down)) as h:
        agent = (await h.client.get("/v1/agents/down", headers=AUTH)).json()
        assert agent["available"] is False
        assert "MCP server 'glossary' could not be reached" in agent["unavailable_reason"]
        assert agent["tools"] == []
        # Its threads can be created and say why they cannot run; the other agent runs.
        resp = await h.client.post("/v1/threads", json={"agent_id": "down"}, headers=AUTH)
        tid = resp.json()["id"]
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "hi"}, headers=AUTH)
        run = await h.wait_for_run(tid, statuses={"completed", "failed"})
        assert run["error_code"] == "agent_unavailable"
        resp = await h.client.post("/v1/threads", json={"agent_id": "fine"}, headers=AUTH)
        await run_turns(h, resp.json()["id"], ["hello"])
        await asyncio.sleep(0)
