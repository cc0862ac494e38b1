"""MCP servers as agent tools, against the real example server (examples/mcp_server.py) over
stdio and streamable HTTP; a server that cannot be reached makes only its agent unavailable."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents_files import agents_file
from tests.support.api import messages, run_turns
from tests.support.app_harness import API_KEY, AUTH, AppFactory, AppHarness
from tests.support.processes import ROOT, free_port
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SERVER = ROOT / "examples" / "mcp_server.py"
STATEFUL = ROOT / "tests" / "support" / "mcp_stateful.py"
LEASE = "A lease is a run's claim on its thread"


def mcp_agent(agent_id: str, server: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": agent_id,
        "model": "offline",
        "tools": ["read_workdir_file"],
        "offline_lookup_tool": "glossary",
        "mcp_servers": [{"name": "glossary", **server}],
    }


@contextlib.contextmanager
def http_server(port: int, stderr: Any = subprocess.DEVNULL) -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
    try:
        for _ in range(600):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            assert proc.poll() is None, "the MCP server exited"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


def ended(pid: int) -> bool:
    """The process is gone, or a zombie its parent has not reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


async def assert_refused(h: AppHarness, tid: str, agent_id: str) -> None:
    """Input for the thread is refused on both doors while its agent is unavailable, saying
    why and when it is retried, and nothing is written."""
    posted = await h.client.post(
        f"/v1/threads/{tid}/messages", json={"content": "What is a lease?"}, headers=AUTH
    )
    assert posted.status_code == 409, posted.text
    assert posted.json()["error"] == "agent_unavailable"
    assert "MCP server 'glossary'" in posted.json()["detail"]
    assert 1 <= int(posted.headers["retry-after"]) <= 60, posted.headers
    body = {"assistant_id": agent_id, "input": {"messages": [{"role": "user", "content": "hi"}]}}
    lg = await h.client.post(f"/threads/{tid}/runs/wait", json=body, headers={"X-Api-Key": API_KEY})
    assert lg.status_code == 409 and lg.json()["error"] == "agent_unavailable", lg.text
    assert await messages(h, tid) == []
    assert await h.run_ids(tid) == []


async def agent_available(h: AppHarness, agent_id: str) -> bool:
    return (await h.client.get(f"/v1/agents/{agent_id}", headers=AUTH)).json()["available"]  # type: ignore[no-any-return]


async def tool_results(h: AppHarness, tid: str) -> list[str]:
    return [m["content"] for m in await messages(h, tid) if m["role"] == "tool"]


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
        # Its threads can be created; input for them is refused, saying why (issue 30: it was
        # accepted, and its run failed after the 202); the other agent runs.
        resp = await h.client.post("/v1/threads", json={"agent_id": "down"}, headers=AUTH)
        tid = resp.json()["id"]
        await assert_refused(h, tid, "down")
        resp = await h.client.post("/v1/threads", json={"agent_id": "fine"}, headers=AUTH)
        await run_turns(h, resp.json()["id"], ["hello"])


async def test_a_stdio_server_is_started_once_and_restarted_after_it_died(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    """Issue 30: every tool call started a new stdio process (0.4 s each, its state lost). Now
    one process answers every call of the worker, and one that died is started again by the
    next call, which it answers."""
    agent = {
        "id": "stateful",
        "model": "offline",
        "tools": [],
        "offline_lookup_tool": "visit",
        "mcp_servers": [{"name": "stateful", "command": ["python", str(STATEFUL)]}],
    }
    async with app_factory(agents_file=agents_file(tmp_path, agent)) as h:
        resp = await h.client.post("/v1/threads", json={"agent_id": "stateful"}, headers=AUTH)
        tid = resp.json()["id"]
        await run_turns(h, tid, ["one", "two", "three"])
        seen = [re.match(r"pid=(\d+) visits=(\d+)", r) for r in await tool_results(h, tid)]
        assert all(seen), seen
        pids = {int(m.group(1)) for m in seen if m}
        assert len(pids) == 1, seen  # one process, its state kept across calls
        assert [int(m.group(2)) for m in seen if m] == [1, 2, 3]
        (pid,) = pids

        os.kill(pid, signal.SIGKILL)  # the process the app started for this server

        async def dead() -> bool:
            return ended(pid)

        await wait_until(dead, "the MCP server process to die")
        await run_turns(h, tid, ["four", "five"])
        later = [re.match(r"pid=(\d+) visits=(\d+)", r) for r in await tool_results(h, tid)]
        restarted = [(int(m.group(1)), int(m.group(2))) for m in later[3:] if m]
        assert len(restarted) == 2 and restarted[0][0] != pid, later
        assert restarted == [(restarted[0][0], 1), (restarted[0][0], 2)]
        assert (await h.client.get("/v1/agents/stateful", headers=AUTH)).json()["available"]


async def test_a_server_down_at_start_is_retried_and_its_agent_comes_back(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    """Issue 30: an agent whose MCP server was down at start stayed unavailable until the
    service restarted, and a post to it was accepted (202) and then failed. Now the post is
    refused (409, Retry-After) and the server is retried until the agent works."""
    port = free_port()
    agent = mcp_agent("late", {"url": f"http://127.0.0.1:{port}/mcp"})
    async with app_factory(agents_file=agents_file(tmp_path, agent)) as h:
        assert not await agent_available(h, "late")
        resp = await h.client.post("/v1/threads", json={"agent_id": "late"}, headers=AUTH)
        tid = resp.json()["id"]
        await assert_refused(h, tid, "late")
        with http_server(port):
            await wait_until(lambda: agent_available(h, "late"), "the agent to come back", 180)
            answer = await ask_glossary(h, "late")
            assert LEASE in answer, answer


async def test_a_server_down_later_is_retried_and_its_agent_comes_back(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    """A server that stops answering while the service runs: the call that finds it down is
    a tool error the run carries on with; then the agent takes no new input until a retry
    reaches the server again."""
    port = free_port()
    agent = mcp_agent("flaky", {"url": f"http://127.0.0.1:{port}/mcp"})
    with contextlib.ExitStack() as first_server:
        first_server.enter_context(http_server(port))
        async with app_factory(agents_file=agents_file(tmp_path, agent)) as h:
            assert LEASE in await ask_glossary(h, "flaky")
            first_server.close()  # the server stops; the service runs on

            resp = await h.client.post("/v1/threads", json={"agent_id": "flaky"}, headers=AUTH)
            tid = resp.json()["id"]
            await run_turns(h, tid, ["What is a lease?"])  # the model read a tool error
            [result] = await tool_results(h, tid)
            assert LEASE not in result, result
            assert not await agent_available(h, "flaky")
            resp = await h.client.post("/v1/threads", json={"agent_id": "flaky"}, headers=AUTH)
            await assert_refused(h, resp.json()["id"], "flaky")
            with http_server(port):
                await wait_until(lambda: agent_available(h, "flaky"), "the agent to come back", 180)
                assert LEASE in await ask_glossary(h, "flaky")


async def test_the_example_http_server_logs_no_error_when_a_client_closes_its_session(
    tmp_path: Path,
) -> None:
    """Issue 30: ``examples/mcp_server.py --http`` logged an ERROR traceback (the MCP SDK's
    standalone SSE writer) every time a client closed its session normally."""
    from langchain_mcp_adapters.client import MultiServerMCPClient

    from app.agents.mcp import McpServer
    from app.agents.spec import McpServerSpec

    log = tmp_path / "mcp_server.log"
    with log.open("wb") as stderr, http_server(free_port(), stderr=stderr) as url:
        server = McpServer(McpServerSpec(name="glossary", url=url), None)
        tools = {t.name: t for t in await server.list_tools()}
        assert LEASE in str(await tools["glossary"].ainvoke({"query": "lease"}))
        client = MultiServerMCPClient({"glossary": {"transport": "streamable_http", "url": url}})
        async with client.session("glossary") as session:
            assert (await session.call_tool("term_count", {})).content
    text = log.read_text()
    assert "ERROR" not in text and "Traceback" not in text, text
