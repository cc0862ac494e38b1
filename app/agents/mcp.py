"""An agent's MCP servers as LangChain tools (``langchain-mcp-adapters``), loaded at start.

Decision (issue 19): the tool list is read once when the registry is built, so GetAgent shows
the MCP tools' names and schemas and the budget covers them. A server that cannot be started
or reached then (or does not answer within ``MCP_START_SECONDS``) makes only its agent
unavailable, with the reason (``McpUnavailable``); the service and every other agent run on.
Each tool call opens its own session (the adapters' default): a stdio server is started per
call, an HTTP server is called per request; a failing call is a tool error the model sees.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from langchain_core.tools import BaseTool

from app.agents.spec import McpServerSpec, mcp_transport

#: How long listing one agent's MCP tools may take at start.
MCP_START_SECONDS = 30.0


class McpUnavailable(Exception):
    """An MCP server of the agent could not be listed; ``str()`` is the reason shown."""


def connection(server: McpServerSpec, base_dir: Path | None) -> dict[str, Any]:
    """The adapters' connection dict of one server."""
    if mcp_transport(server) == "stdio":
        # ``python``: the interpreter running Threadkeeper (its venv has the ``mcp`` package).
        command = sys.executable if server.command[0] == "python" else server.command[0]
        conn: dict[str, Any] = {
            "transport": "stdio",
            "command": command,
            "args": list(server.command[1:]),
        }
        if server.env:
            from mcp.client.stdio import get_default_environment

            # The MCP SDK starts a stdio server with a minimal environment; keep PATH & co.
            conn["env"] = {**get_default_environment(), **server.env}
        if server.cwd or base_dir is not None:
            cwd = Path(server.cwd) if server.cwd else Path()
            conn["cwd"] = str(cwd if cwd.is_absolute() or base_dir is None else base_dir / cwd)
        return conn
    conn = {"transport": "streamable_http", "url": server.url}
    if server.headers:
        conn["headers"] = dict(server.headers)
    return conn


async def load_mcp_tools(
    servers: list[McpServerSpec], *, base_dir: Path | None = None
) -> list[BaseTool]:
    """Every tool of every server, or ``McpUnavailable`` naming the first that failed."""
    from langchain_mcp_adapters.client import MultiServerMCPClient

    tools: list[BaseTool] = []
    for server in servers:
        client = MultiServerMCPClient({server.name: connection(server, base_dir)})  # type: ignore[dict-item]
        try:
            async with asyncio.timeout(MCP_START_SECONDS):
                tools.extend(await client.get_tools(server_name=server.name))
        except TimeoutError as exc:
            raise McpUnavailable(
                f"MCP server {server.name!r} did not list its tools within {MCP_START_SECONDS:g} s"
            ) from exc
        except Exception as exc:  # the SDK raises whatever the transport raised
            raise McpUnavailable(
                f"MCP server {server.name!r} could not be reached ({_cause(exc)})"
            ) from exc
    return tools


def _cause(exc: BaseException) -> str:
    """The innermost error of an exception group (anyio task groups wrap transport errors)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
