"""An agent's MCP servers as services of this process (``langchain-mcp-adapters``).

Decisions (issues 19, 30):

- The tool list is read when the registry is built, so GetAgent shows the MCP tools' names and
  schemas and the budget covers them. A server that cannot be listed then (or within
  ``MCP_START_SECONDS``) makes only its agent unavailable (``McpUnavailable``); the registry
  retries it with backoff (``app.agents.recovery``).
- A stdio server is started once per worker process and its session is reused by every call
  (the adapters' ``client.session(...)``, held open by one task, since an MCP session must be
  entered and left in the same task). A call that finds the process gone restarts it and is
  sent once more (it was never sent); a call the process died during fails (it may have acted),
  and the next call restarts it. A restart that fails reports the server down.
- A streamable-HTTP server gets a session per call (the adapters' default: nothing to go stale
  when the server restarts or sits behind a load balancer); a call that cannot reach it
  reports the server down.
- A call that fails is a tool error the model sees (``ToolErrorMiddleware``), never a failed run.

Calls are routed through the adapters' tool-call interceptor, so their tool conversion (schemas,
content, execution errors) is used unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import structlog
from langchain_core.tools import BaseTool
from mcp import ClientSession
from mcp.shared.exceptions import McpError
from mcp.types import CONNECTION_CLOSED

from app.agents.spec import McpServerSpec, mcp_transport

log = structlog.get_logger(__name__)

#: How long listing one server's tools (a stdio server: starting it) may take.
MCP_START_SECONDS = 30.0
#: How long a held session's task may take to end (a stdio server gets stdin closed, then the
#: MCP SDK waits 2 s before it terminates the process).
MCP_STOP_SECONDS = 10.0


class McpUnavailable(Exception):
    """An MCP server of the agent could not be listed or (re)started; ``str()`` is the reason."""


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


def cause(exc: BaseException) -> str:
    """The innermost error of an exception group (anyio task groups wrap transport errors)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the server could not be talked to (rather than that a call was
    refused by it): a connection, stream or timeout failure, or the session closing."""
    for leaf in _leaves(exc):
        if isinstance(leaf, McpError):
            if leaf.error.code == CONNECTION_CLOSED:
                return True
        elif isinstance(
            leaf,
            OSError
            | TimeoutError
            | httpx.HTTPError
            | anyio.ClosedResourceError
            | anyio.BrokenResourceError
            | anyio.EndOfStream,
        ):
            return True
    return False


@dataclass
class _Held:
    """An open session and the task holding it (the only task that may leave it)."""

    session: ClientSession
    close: asyncio.Event
    task: asyncio.Task[None]


class McpServer:
    """One MCP server of one agent, in this process.

    ``hold``: keep a stdio server's session open between calls (a process that runs tools);
    without it (an API process that only lists the tools) the listing session is closed at
    once. ``on_down(reason)``: told when a call finds the server unreachable and, for stdio,
    it cannot be restarted either.
    """

    def __init__(
        self,
        spec: McpServerSpec,
        base_dir: Path | None,
        *,
        hold: bool = True,
        on_down: Callable[[str], None] | None = None,
        agent_id: str = "",
    ) -> None:
        from langchain_mcp_adapters.client import MultiServerMCPClient

        self.name = spec.name
        self.agent_id = agent_id
        #: The tool names of the last listing.
        self.tool_names: list[str] = []
        self.stdio = mcp_transport(spec) == "stdio"
        self.hold = hold and self.stdio
        self.on_down = on_down
        self._client = MultiServerMCPClient(
            {spec.name: connection(spec, base_dir)},  # type: ignore[dict-item]
            tool_interceptors=[self._intercept],
        )
        self._held: _Held | None = None
        self._lock = asyncio.Lock()
        #: Sessions opened on a held server (for a stdio server: processes started).
        self.sessions_opened = 0

    async def list_tools(self) -> list[BaseTool]:
        """The server's tools as LangChain tools, or ``McpUnavailable`` saying why not."""
        from langchain_mcp_adapters.tools import load_mcp_tools

        try:
            if self.hold:
                session = await self._session()
                async with asyncio.timeout(MCP_START_SECONDS):
                    tools = await load_mcp_tools(
                        session,
                        connection=self._client.connections[self.name],
                        server_name=self.name,
                        tool_interceptors=[self._intercept],
                    )
            else:
                async with asyncio.timeout(MCP_START_SECONDS):
                    tools = await self._client.get_tools(server_name=self.name)
            self.tool_names = [t.name for t in tools]
            return tools
        except McpUnavailable:
            raise
        except TimeoutError as exc:
            await self.close()
            raise McpUnavailable(
                f"MCP server {self.name!r} did not list its tools within {MCP_START_SECONDS:g} s"
            ) from exc
        except Exception as exc:  # the SDK raises whatever the transport raised
            await self.close()
            raise McpUnavailable(
                f"MCP server {self.name!r} could not be reached ({cause(exc)})"
            ) from exc

    async def close(self) -> None:
        """End the held session (a stdio server: the process exits)."""
        held, self._held = self._held, None
        if held is not None:
            await _release(held)

    # --- calls ----------------------------------------------------------------------------------
    async def _intercept(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        """Every tool call of this server (the adapters' interceptor)."""
        if not self.hold:
            try:
                return await handler(request)  # a session of its own (streamable HTTP)
            except Exception as exc:
                if unreachable(exc):
                    self._report_down(
                        f"MCP server {self.name!r} could not be reached ({cause(exc)})"
                    )
                raise
        for attempt in (1, 2):
            try:
                session = await self._session()
            except McpUnavailable as exc:
                self._report_down(str(exc))
                raise
            try:
                return await session.call_tool(request.name, request.args)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                # The process ended since the last call; this request never left: restart it
                # and send the request to the new one.
                log.warning("mcp_server_restarting", server=self.name, reason="process ended")
                await self._drop(session)
                if attempt == 2:
                    raise
            except McpError as exc:
                if exc.error.code == CONNECTION_CLOSED:
                    # Died during the call: not sent again (it may have acted); the next
                    # call starts a new process.
                    log.warning("mcp_server_died_in_call", server=self.name, tool=request.name)
                    await self._drop(session)
                raise
        raise AssertionError("unreachable")

    def _report_down(self, reason: str) -> None:
        log.warning("mcp_server_down", agent_id=self.agent_id, server=self.name, reason=reason)
        if self.on_down is not None:
            self.on_down(reason)

    # --- the held session -----------------------------------------------------------------------
    async def _session(self) -> ClientSession:
        """The held session, opened (the process started) when there is none."""
        async with self._lock:
            if self._held is None:
                self._held = await self._open()
            return self._held.session

    async def _drop(self, session: ClientSession) -> None:
        async with self._lock:
            if self._held is not None and self._held.session is session:
                held, self._held = self._held, None
                await _release(held)

    async def _open(self) -> _Held:
        loop = asyncio.get_running_loop()
        opened: asyncio.Future[ClientSession] = loop.create_future()
        close = asyncio.Event()

        async def hold() -> None:
            try:
                async with self._client.session(self.name) as session:
                    opened.set_result(session)
                    await close.wait()
            except asyncio.CancelledError:
                if not opened.done():
                    opened.cancel()
                raise
            except Exception as exc:
                if not opened.done():
                    opened.set_exception(exc)
                else:  # the transport ended the session; the next call notices and restarts
                    log.info("mcp_session_ended", server=self.name, reason=cause(exc))

        task = asyncio.create_task(hold(), name=f"mcp-session:{self.name}")
        try:
            async with asyncio.timeout(MCP_START_SECONDS):
                session = await asyncio.shield(opened)
        except BaseException as exc:
            close.set()
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            if isinstance(exc, TimeoutError):
                raise McpUnavailable(
                    f"MCP server {self.name!r} did not start within {MCP_START_SECONDS:g} s"
                ) from exc
            if isinstance(exc, Exception):
                raise McpUnavailable(
                    f"MCP server {self.name!r} could not be started ({cause(exc)})"
                ) from exc
            raise
        self.sessions_opened += 1
        if self.sessions_opened > 1:
            log.info("mcp_server_restarted", server=self.name, starts=self.sessions_opened)
        return _Held(session, close, task)


async def _release(held: _Held) -> None:
    held.close.set()
    try:
        async with asyncio.timeout(MCP_STOP_SECONDS):
            await held.task
    except TimeoutError:
        held.task.cancel()
        with contextlib.suppress(BaseException):
            await held.task
    except Exception:  # the session had failed already: nothing left to stop
        pass
