"""Every agent assembled by Threadkeeper itself, so none escapes the compression contract (its
own summary middleware, approvals and tool-error handling): ``build_registry`` at start, and
``preflight``, the same checks without MCP servers or a database (``python -m app serve|worker``
before anything starts, and ``python -m app check``). An agent that cannot start now (an MCP
server down) is withdrawn and retried (``app.agents.recovery``).

Its parts have their own homes: the model and summarizer (``app.agents.models``), the tools and
approvals (``app.agents.toolset``), what is shown of an agent (``app.agents.info``), the graph
(``app.agents.graph``) and the registry that serves them (``app.agents.registry``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import SystemMessage
from langgraph.checkpoint.base import BaseCheckpointSaver

from app.agents.graph import AgentRuntime, build_agent_runtime
from app.agents.info import AgentInfo, agent_info
from app.agents.mcp import McpServer, McpUnavailable
from app.agents.models import agent_model, agent_summarizer, model_name, resilience
from app.agents.own_graph import load_graph, load_graph_blocking, output_keys
from app.agents.provider_http import shared_http_client
from app.agents.recovery import Recovery
from app.agents.registry import AgentRegistry
from app.agents.spec import (
    MANUAL_COMPRESSION,
    AgentsFileError,
    AgentSpec,
    budget_of,
    load_agent_specs,
)
from app.agents.tools import KbSearch
from app.agents.toolset import agent_approvals, agent_tools, static_tools
from app.compression.budget import Budget, agent_budget_misfit
from app.compression.summarizers import Summarizer
from app.compression.summary import ContextCompressor
from app.compression.workdir import Workdir
from app.config import CompressionSettings, Settings
from app.offline.extractive import ExtractiveChatModel

__all__ = ["SummarizerOverride", "build_registry", "preflight"]

#: Tests hand one summarizer for every agent, or one per agent id.
SummarizerOverride = Summarizer | Mapping[str, Summarizer] | None


async def build_registry(
    specs: list[AgentSpec],
    settings: Settings,
    *,
    search_kb: KbSearch,
    workdir: Workdir,
    checkpointer: BaseCheckpointSaver[Any] | None,
    model: BaseChatModel | None = None,
    summarizer: SummarizerOverride = None,
    base_dir: Path | None = None,
    hold_mcp_sessions: bool = True,
) -> AgentRegistry:
    """Assemble every agent. ``model``/``summarizer`` replace the configured ones (tests).
    Configuration errors raise ``AgentsFileError``; an MCP server that cannot be reached makes
    only its agent unavailable, until a retry reaches it. ``hold_mcp_sessions``: this process
    runs tools, so each stdio server stays up between calls (``app.agents.mcp``)."""
    state_graph = create_agent(model=ExtractiveChatModel(), tools=[], checkpointer=checkpointer)
    registry = AgentRegistry({}, {}, state_graph)
    servers: dict[str, list[McpServer]] = {}
    for spec in specs:
        servers[spec.id] = [
            McpServer(
                server,
                base_dir,
                hold=hold_mcp_sessions,
                on_down=partial(registry.mcp_down, spec.id),
                agent_id=spec.id,
            )
            for server in spec.mcp_servers
        ]
        registry.mcp_servers.extend(servers[spec.id])

    async def assemble(spec: AgentSpec) -> tuple[AgentRuntime, AgentInfo]:
        budget = budget_of(spec, settings)
        if spec.graph:
            return await _own_graph(
                spec, settings, budget, base_dir, checkpointer, workdir, search_kb, summarizer
            )
        tools = await agent_tools(spec, settings, search_kb, workdir, servers[spec.id])
        approvals = agent_approvals(spec, settings, tools)
        system_prompt = spec.system_prompt or settings.agent.system_prompt
        # ``preflight`` refused static misfits at start (budgets built in code, as the tests do,
        # are the caller's); an MCP server's tool schemas arrive only now, so check those here.
        misfit = spec.mcp_servers and agent_budget_misfit(
            Budget.of(budget), system_message=system_prompt, tools=tools, agent=spec.id
        )
        if misfit:
            raise AgentsFileError(misfit)
        compressor = ContextCompressor.from_settings(
            budget, summarizer=_summarizer(spec, settings, budget, summarizer), workdir=workdir
        )
        runtime = build_agent_runtime(
            model=model or agent_model(spec, settings),
            provider_middleware=resilience(spec, settings),
            model_name="" if model else model_name(spec.model, settings),
            tools=tools,
            compressor=compressor,
            system_prompt=system_prompt,
            checkpointer=checkpointer,
            approval_tools=approvals,
            recursion_limit=spec.recursion_limit,
            agent_id=spec.id,
        )
        return runtime, agent_info(spec, settings, budget, tools, approvals, None)

    async def start(agent_id: str) -> None:
        spec = next(s for s in specs if s.id == agent_id)
        try:
            with shared_http_client(registry.http):  # its models share one connection pool
                registry.install(*await assemble(spec))
        except (McpUnavailable, AgentsFileError) as exc:
            # Static mistakes were refused by ``preflight``; what is left came from an MCP
            # server (down, or its tools not what the file expects): this agent only.
            budget = budget_of(spec, settings)
            registry.withdraw(agent_info(spec, settings, budget, [], frozenset(), str(exc)))
            raise

    registry.recovery = Recovery(start)
    for spec in specs:
        try:
            await start(spec.id)
        except (McpUnavailable, AgentsFileError):
            registry.recovery.schedule(spec.id)
    return registry


def preflight(settings: Settings) -> list[AgentSpec]:
    """The agents file checked as far as it can be without starting MCP servers or opening the
    database: every model and summarizer built, every built-in and Python tool resolved, the
    approvals matched. ``AgentsFileError`` (one line) on the first problem; the CLI exits 2."""
    specs = load_agent_specs(settings)

    async def no_search(*, kb: str, owner_id: str, query: str, limit: int) -> dict[str, Any]:
        return {}

    workdir = Workdir(settings.workdir.workdir_path)  # never written: no tool runs here
    base = Path(settings.agent.agents_file).parent if settings.agent.agents_file else None
    for spec in specs:
        budget = budget_of(spec, settings)
        if spec.graph:
            agent_summarizer(spec, settings, budget)
            loaded = load_graph_blocking(spec, base)
            _check_declared(spec, loaded.opted_in)
            continue
        agent_model(spec, settings)
        resilience(spec, settings)
        agent_summarizer(spec, settings, budget)
        tools = static_tools(spec, settings, no_search, workdir)
        system = spec.system_prompt or settings.agent.system_prompt
        misfit = agent_budget_misfit(
            Budget.of(budget), system_message=system, tools=tools, agent=spec.id
        )
        if misfit is not None:
            raise AgentsFileError(misfit)
        if not spec.mcp_servers:  # with MCP, the rest of the names is known only at start
            agent_approvals(spec, settings, tools)
    return specs


async def _own_graph(
    spec: AgentSpec,
    settings: Settings,
    budget: CompressionSettings,
    base_dir: Path | None,
    checkpointer: BaseCheckpointSaver[Any] | None,
    workdir: Workdir,
    search_kb: KbSearch,
    override: SummarizerOverride,
) -> tuple[AgentRuntime, AgentInfo]:
    """The runtime of a graph of the user's own: its graph with our checkpointer, and the
    compressor its opted-in model calls and manual compression use (the agent's budget)."""
    loaded = await load_graph(spec, base_dir, checkpointer)
    _check_declared(spec, loaded.opted_in)
    compressor = ContextCompressor.from_settings(
        budget, summarizer=_summarizer(spec, settings, budget, override), workdir=workdir
    )
    runtime = AgentRuntime(
        graph=loaded.graph,
        compressor=compressor,
        system_message=SystemMessage(content=""),
        tools=[],
        recursion_limit=spec.recursion_limit,
        agent_id=spec.id,
        model_name=f"graph:{spec.graph}",
        own_graph=True,
        output_keys=output_keys(loaded.graph),
        compression_opted_in=loaded.opted_in,
        model_node=None,
        tools_node=None,
        search_kb=search_kb,
        knowledge_base=spec.knowledge_base,
    )
    info = agent_info(spec, settings, budget, [], frozenset(), None, opted_in=loaded.opted_in)
    return runtime, info


def _check_declared(spec: AgentSpec, opted_in: bool) -> None:
    """A graph that declares manual compression must call its model through Threadkeeper's."""
    if MANUAL_COMPRESSION in (spec.capabilities or ()) and not opted_in:
        raise AgentsFileError(
            f"graph {spec.id!r} ({spec.graph}): declares manual_compression but does not use "
            "Threadkeeper's compression (threadkeeper.CompressionMiddleware, compression_node "
            "or compressed_model_call)"
        )


def _summarizer(
    spec: AgentSpec, settings: Settings, budget: CompressionSettings, override: SummarizerOverride
) -> Summarizer:
    """The test's override for this agent, if any, else the agent's own."""
    if isinstance(override, Mapping):
        if spec.id in override:
            return override[spec.id]
    elif override is not None:
        return override
    return agent_summarizer(spec, settings, budget)
