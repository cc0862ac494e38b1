"""The registered agents: every one assembled by Threadkeeper itself, so none escapes the
compression contract (its own summary middleware, approvals and tool-error handling).

``AgentRegistry`` is the one accessor for "the registered agents" (``infos()``/``info(id)``:
what GetAgent shows) and for "the runtime of this thread's agent" (``runtime(agent_id)``).
An agent whose MCP server cannot be reached (at start, or later) is *unavailable* (the reason
in ``info(id).unavailable_reason``; new runs of its threads refused by ``require_available``)
and started again with backoff (``app.agents.recovery``); one that left the file is unavailable
for good. Neither stops the service.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import structlog
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.base import BaseCheckpointSaver

from app.agents.graph import AgentRuntime, build_agent_runtime
from app.agents.mcp import McpServer, McpUnavailable
from app.agents.models import build_chat_model, build_summarizer, provider_model
from app.agents.recovery import Recovery
from app.agents.resilience import provider_middleware
from app.agents.spec import (
    DEFAULT_AGENT_ID,
    MANUAL_COMPRESSION,
    OFFLINE,
    AgentsFileError,
    AgentSpec,
    budget_of,
    import_object,
    load_agent_specs,
)
from app.agents.tools import KbSearch, build_tools
from app.compression.budget import Budget, agent_budget_misfit
from app.compression.summarizers import Summarizer, llm_summarizer
from app.compression.summary import ContextCompressor
from app.compression.tool_names import WEB_SEARCH
from app.compression.workdir import Workdir
from app.config import CompressionSettings, Settings
from app.domain.errors import AgentUnavailable, UnknownAgent
from app.offline.extractive import ExtractiveChatModel
from app.offline.summarizer import ExtractiveSummarizer

log = structlog.get_logger(__name__)

#: Tests hand one summarizer for every agent, or one per agent id.
SummarizerOverride = Summarizer | Mapping[str, Summarizer] | None


@dataclass(frozen=True, slots=True)
class ToolInfo:
    name: str
    description: str
    #: JSON Schema of the arguments the model sends (injected runtime arguments left out).
    parameters: dict[str, Any]
    needs_approval: bool


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """What GetAgent shows: no base URL, no key, no environment."""

    id: str
    name: str
    description: str
    model: str
    summarizer: str
    knowledge_base: str
    capabilities: tuple[str, ...]
    budget: CompressionSettings
    recursion_limit: int
    tools: tuple[ToolInfo, ...]
    unavailable_reason: str | None = None

    @property
    def available(self) -> bool:
        return self.unavailable_reason is None

    @property
    def manual_compression(self) -> bool:
        return MANUAL_COMPRESSION in self.capabilities


def removed_reason(agent_id: str) -> str:
    return (
        f"agent {agent_id!r} is not registered in this deployment (removed from the agents file?)"
    )


class AgentRegistry:
    def __init__(
        self,
        runtimes: dict[str, AgentRuntime],
        infos: dict[str, AgentInfo],
        state_graph: Any,
    ) -> None:
        self._runtimes = runtimes
        self._infos = infos
        #: Reads/deletes checkpoints of a thread whose agent is unavailable.
        self.state_graph = state_graph
        #: Starts unavailable agents again (set by ``build_registry``).
        self.recovery: Recovery | None = None
        #: Every MCP server of every agent (stopped by ``close``).
        self.mcp_servers: list[McpServer] = []

    # --- availability (issue 30) ----------------------------------------------------------------
    def install(self, runtime: AgentRuntime, info: AgentInfo) -> None:
        self._runtimes[info.id], self._infos[info.id] = runtime, info

    def withdraw(self, info: AgentInfo) -> None:
        """The agent (``info`` saying why) takes no new run until it is installed again."""
        before = self._infos.get(info.id)
        if info.id in self._runtimes or before is None or before != info:  # news: logged once
            log.error("agent_unavailable", agent_id=info.id, reason=info.unavailable_reason)
        self._runtimes.pop(info.id, None)
        self._infos[info.id] = info

    def mcp_down(self, agent_id: str, reason: str) -> None:
        """An MCP server of the (running) agent stopped answering: withdrawn, retried."""
        info = self._infos.get(agent_id)
        if agent_id in self._runtimes and info is not None and self.recovery is not None:
            self.withdraw(dataclasses.replace(info, unavailable_reason=reason))
            self.recovery.schedule(agent_id)

    def unavailable(self) -> bool:
        """Whether any registered agent is unavailable now (cheap: asked on every intake)."""
        return len(self._runtimes) < len(self._infos)

    def require_available(self, agent_id: str) -> None:
        """``AgentUnavailable`` (``retry_after``: the next attempt) unless it can run now."""
        if agent_id in self._runtimes:
            return
        reason = self.unavailable_reason(agent_id) or removed_reason(agent_id)
        retry = self.recovery.retry_in(agent_id) if self.recovery is not None else None
        detail = f"the thread's agent is unavailable: {reason}"
        if retry is not None:
            detail += f"; it is retried, next in {retry} s"
        raise AgentUnavailable(detail, reason=reason, retry_after=retry)

    async def close(self) -> None:
        """Stop retrying, and stop every MCP server this process started."""
        if self.recovery is not None:
            await self.recovery.close()
        for server in self.mcp_servers:
            await server.close()

    @property
    def default_id(self) -> str:
        """The agent a new thread gets when it names none: ``default`` if registered, else the
        first agent of the file."""
        return DEFAULT_AGENT_ID if DEFAULT_AGENT_ID in self._infos else next(iter(self._infos))

    def infos(self) -> list[AgentInfo]:
        return list(self._infos.values())

    def info(self, agent_id: str) -> AgentInfo | None:
        return self._infos.get(agent_id)

    def is_registered(self, agent_id: str) -> bool:
        return agent_id in self._infos

    def unavailable_reason(self, agent_id: str) -> str | None:
        info = self._infos.get(agent_id)
        return removed_reason(agent_id) if info is None else info.unavailable_reason

    def runtime(self, agent_id: str) -> AgentRuntime:
        """The runtime of a thread's agent, or ``AgentUnavailable`` saying why there is none."""
        found = self._runtimes.get(agent_id)
        if found is None:
            self.require_available(agent_id)
            raise AssertionError("unreachable")
        return found

    def runtimes(self) -> list[AgentRuntime]:
        return list(self._runtimes.values())

    def tools_by_name(self, agent_id: str) -> dict[str, BaseTool]:
        """The agent's tools by name (none when it is unavailable)."""
        found = self._runtimes.get(agent_id)
        return {t.name: t for t in found.tools} if found else {}

    def agent_for_new_thread(self, agent_id: str | None) -> str:
        """CreateThread's agent: the one named (``UnknownAgent`` if not registered) or the
        default. An agent registered but unavailable is accepted: its threads say why."""
        if agent_id is None:
            return self.default_id
        if agent_id not in self._infos:
            known = ", ".join(sorted(self._infos))
            raise UnknownAgent(f"no agent {agent_id!r} is registered (agents: {known})")
        return agent_id


def _refuse_misfit(spec: AgentSpec, budget: Budget, system_message: Any, tools: Any) -> None:
    misfit = agent_budget_misfit(budget, system_message=system_message, tools=tools, agent=spec.id)
    if misfit is not None:
        raise AgentsFileError(misfit)


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
        tools = await _tools(spec, settings, search_kb, workdir, servers[spec.id])
        approvals = _approvals(spec, settings, tools)
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
            model=model or _model(spec, settings),
            provider_middleware=_resilience(spec, settings),
            model_name="" if model else model_name(spec.model, settings),
            tools=tools,
            compressor=compressor,
            system_prompt=system_prompt,
            checkpointer=checkpointer,
            approval_tools=approvals,
            recursion_limit=spec.recursion_limit,
            agent_id=spec.id,
        )
        return runtime, _info(spec, settings, budget, tools, approvals, None)

    async def start(agent_id: str) -> None:
        spec = next(s for s in specs if s.id == agent_id)
        try:
            registry.install(*await assemble(spec))
        except (McpUnavailable, AgentsFileError) as exc:
            # Static mistakes were refused by ``preflight``; what is left came from an MCP
            # server (down, or its tools not what the file expects): this agent only.
            budget = budget_of(spec, settings)
            registry.withdraw(_info(spec, settings, budget, [], frozenset(), str(exc)))
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
    for spec in specs:
        budget = budget_of(spec, settings)
        _model(spec, settings)
        _resilience(spec, settings)
        _summarizer(spec, settings, budget, None)
        tools = _static_tools(spec, settings, no_search, workdir)
        system = spec.system_prompt or settings.agent.system_prompt
        _refuse_misfit(spec, Budget.of(budget), system, tools)
        if not spec.mcp_servers:  # with MCP, the rest of the names is known only at start
            _approvals(spec, settings, tools)
    return specs


# --- models -------------------------------------------------------------------------------------
def model_name(spec_model: str, settings: Settings) -> str:
    """The model a spec names, as shown by GetAgent (no URL, no key)."""
    if spec_model == OFFLINE or (not spec_model and not settings.models.llm_base_url):
        return OFFLINE
    return spec_model or f"openai:{settings.models.llm_model}"


def provider_models(spec: AgentSpec, settings: Settings) -> dict[str, tuple[tuple[str, ...], Any]]:
    """The provider models the agent calls by role (``model``, ``summarizer``; offline ones
    left out): (what names the endpoint and model: name, base URL, key variable; the model)."""
    found: dict[str, tuple[tuple[str, ...], Any]] = {}
    for role, which in (("model", spec.model), ("summarizer", spec.summarizer or spec.model)):
        name = model_name(which, settings)
        if name == OFFLINE:
            continue
        if which:
            key = (which, spec.base_url, spec.api_key_env)
            found[role] = key, provider_model(spec, which, settings)
        else:  # the THREADKEEPER_LLM_* endpoint (a summarizer may name its own model there)
            m = settings.models
            model = m.llm_model if role == "model" else (m.summary_model or m.llm_model)
            key = (f"openai:{model}", m.llm_base_url, "THREADKEEPER_LLM_API_KEY")
            found[role] = key, build_chat_model(m, model=model)
    return found


def _resilience(spec: AgentSpec, settings: Settings) -> list[Any]:
    fallbacks = [provider_model(spec, which, settings) for which in spec.fallback_models]
    return provider_middleware(spec, settings, model_name(spec.model, settings), fallbacks)


def _model(spec: AgentSpec, settings: Settings) -> BaseChatModel:
    if spec.model == OFFLINE or (not spec.model and not settings.models.llm_base_url):
        return ExtractiveChatModel(kb_tool_name=spec.offline_lookup_tool)
    if not spec.model:
        return build_chat_model(settings.models)
    return provider_model(spec, spec.model, settings)


def _summarizer(
    spec: AgentSpec, settings: Settings, budget: CompressionSettings, override: SummarizerOverride
) -> Summarizer:
    if isinstance(override, Mapping):
        if spec.id in override:
            return override[spec.id]
    elif override is not None:
        return override
    which = spec.summarizer or spec.model
    if which == OFFLINE or (not which and not settings.models.llm_base_url):
        return ExtractiveSummarizer()
    if not which:
        return build_summarizer(settings.models, budget)  # today's: THREADKEEPER_SUMMARY_MODEL
    return llm_summarizer(provider_model(spec, which, settings), budget)


# --- tools --------------------------------------------------------------------------------------
async def _tools(
    spec: AgentSpec,
    settings: Settings,
    search_kb: KbSearch,
    workdir: Workdir,
    servers: list[McpServer],
) -> list[BaseTool]:
    tools = _static_tools(spec, settings, search_kb, workdir)
    for server in servers:  # McpUnavailable names the first that cannot be listed
        tools.extend(await server.list_tools())
    seen: set[str] = set()
    for t in tools:
        if t.name in seen:
            raise AgentsFileError(f"agent {spec.id!r}: field 'tools': two tools named {t.name!r}")
        seen.add(t.name)
    return tools


def _static_tools(
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
    names = [t.name for t in tools]
    for name in names:
        if names.count(name) > 1:
            raise AgentsFileError(f"agent {spec.id!r}: field 'tools': two tools named {name!r}")
    return tools


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


def _approvals(spec: AgentSpec, settings: Settings, tools: list[BaseTool]) -> frozenset[str]:
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


def _info(
    spec: AgentSpec,
    settings: Settings,
    budget: CompressionSettings,
    tools: list[BaseTool],
    approvals: frozenset[str],
    unavailable: str | None,
) -> AgentInfo:
    return AgentInfo(
        id=spec.id,
        name=spec.display_name,
        description=spec.description,
        model=model_name(spec.model, settings),
        summarizer=model_name(spec.summarizer or spec.model, settings),
        knowledge_base=spec.knowledge_base,
        capabilities=tuple(spec.capabilities),
        budget=budget,
        recursion_limit=spec.recursion_limit,
        tools=tuple(_tool_info(t, approvals) for t in tools),
        unavailable_reason=unavailable,
    )


def _tool_info(tool: BaseTool, approvals: frozenset[str]) -> ToolInfo:
    function = convert_to_openai_tool(tool)["function"]
    return ToolInfo(
        name=tool.name,
        description=str(function.get("description") or ""),
        parameters=dict(function.get("parameters") or {}),
        needs_approval=tool.name in approvals,
    )
