"""An agent's tools, assembled: the built-ins it names, its Python tools, its MCP servers'
tools, and which of them wait for a human's approval. Names are checked here (two tools of one
name, a built-in that needs configuration, an approval for a tool the agent lacks), each as an
``AgentsFileError`` naming the agent and the field."""

from __future__ import annotations

from collections.abc import Callable

from langchain_core.tools import BaseTool

from app.agents.mcp import McpServer
from app.agents.spec import AgentsFileError, AgentSpec, import_object
from app.agents.tools import KbSearch, build_tools
from app.compression.tool_names import WEB_SEARCH
from app.compression.workdir import Workdir
from app.config import Settings

__all__ = ["agent_approvals", "agent_tools", "static_tools"]


async def agent_tools(
    spec: AgentSpec,
    settings: Settings,
    search_kb: KbSearch,
    workdir: Workdir,
    servers: list[McpServer],
) -> list[BaseTool]:
    """Every tool of the agent, its MCP servers' included (``McpUnavailable`` names the first
    that cannot be listed)."""
    tools = static_tools(spec, settings, search_kb, workdir)
    for server in servers:
        tools.extend(await server.list_tools())
    _refuse_duplicates(spec, tools)
    return tools


def static_tools(
    spec: AgentSpec, settings: Settings, search_kb: KbSearch, workdir: Workdir
) -> list[BaseTool]:
    """The built-in and Python tools (everything but MCP)."""
    builtins = build_tools(settings.web_search, search_kb, workdir, kb=spec.knowledge_base)
    if spec.tools is None:  # as before registries: every built-in (web_search when configured)
        tools = builtins
    else:
        by_name = {t.name: t for t in builtins}
        if WEB_SEARCH in spec.tools and WEB_SEARCH not in by_name:
            raise AgentsFileError(
                f"agent {spec.id!r}: field 'tools': web_search needs THREADKEEPER_WEB_SEARCH_URL"
            )
        tools = [by_name[name] for name in spec.tools]
    for target in spec.python_tools:
        tools.extend(_python_tools(spec, target))
    _refuse_duplicates(spec, tools)
    return tools


def agent_approvals(spec: AgentSpec, settings: Settings, tools: list[BaseTool]) -> frozenset[str]:
    """The names of the agent's tools that wait for a human's decision."""
    names = {t.name for t in tools}
    if spec.approval_tools is None:
        # The settings' list, as before registries (names of absent tools are ignored).
        return frozenset(settings.agent.approval_tool_names() & names)
    for name in spec.approval_tools:
        if name not in names:
            raise AgentsFileError(
                f"agent {spec.id!r}: field 'approval_tools': the agent has no tool {name!r}"
            )
    return frozenset(spec.approval_tools)


def _refuse_duplicates(spec: AgentSpec, tools: list[BaseTool]) -> None:
    seen: set[str] = set()
    for t in tools:
        if t.name in seen:
            raise AgentsFileError(f"agent {spec.id!r}: field 'tools': two tools named {t.name!r}")
        seen.add(t.name)


def _python_tools(spec: AgentSpec, target: str) -> list[BaseTool]:
    where = f"agent {spec.id!r}: field 'python_tools'"
    obj = import_object(target, where)
    items = list(obj) if isinstance(obj, list | tuple) else [obj]
    tools: list[BaseTool] = []
    for item in items:
        if isinstance(item, BaseTool):
            tools.append(item)
        elif isinstance(item, Callable):  # type: ignore[arg-type]
            from langchain_core.tools import tool as as_tool

            try:
                tools.append(as_tool(item))
            except Exception as exc:
                raise AgentsFileError(f"{where}: {target} is not usable as a tool ({exc})") from exc
        else:
            raise AgentsFileError(f"{where}: {target} is not a LangChain tool or a function")
    return tools
