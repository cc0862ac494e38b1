"""The registered agents: every one assembled by Threadkeeper itself, so none escapes the
compression contract (its own summary middleware, approvals and tool-error handling).

``AgentRegistry`` is the one accessor for "the registered agents" (``infos()``/``info(id)``:
what GetAgent shows) and for "the runtime of this thread's agent" (``runtime(agent_id)``).
An agent whose MCP server could not be reached at start is registered but *unavailable* (its
reason in ``info(id).unavailable_reason``; its threads' runs fail with ``agent_unavailable``);
a thread whose agent left the file is treated the same way. Neither stops the service.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.base import BaseCheckpointSaver

from app.agents.budget import Budget, agent_budget_misfit
from app.agents.extractive import ExtractiveChatModel
from app.agents.graph import AgentRuntime, build_agent_runtime
from app.agents.mcp import McpUnavailable, load_mcp_tools
from app.agents.middlewares.summary import ContextCompressor
from app.agents.models import build_chat_model, init_provider_model
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
from app.agents.summarizers import (
    ExtractiveSummarizer,
    Summarizer,
    build_summarizer,
    llm_summarizer,
)
from app.agents.tool_names import WEB_SEARCH
from app.agents.tools import KbSearch, build_tools
from app.agents.workdir import Workdir
from app.config import CompressionSettings, Settings
from app.domain.errors import AgentUnavailable, UnknownAgent

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
            reason = self.unavailable_reason(agent_id) or removed_reason(agent_id)
            raise AgentUnavailable(f"the thread's agent is unavailable: {reason}", reason=reason)
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
) -> AgentRegistry:
    """Assemble every agent. ``model``/``summarizer`` replace the configured ones (tests).
    Configuration errors raise ``AgentsFileError``; an MCP server that cannot be reached makes
    only its agent unavailable."""
    runtimes: dict[str, AgentRuntime] = {}
    infos: dict[str, AgentInfo] = {}
    for spec in specs:
        budget = budget_of(spec, settings)
        try:
            tools = await _tools(spec, settings, search_kb, workdir, base_dir)
            approvals = _approvals(spec, settings, tools)
        except (McpUnavailable, AgentsFileError) as exc:
            # Static mistakes were refused by ``preflight``; what is left came from an MCP
            # server (down, or its tools not what the file expects): this agent only.
            log.error("agent_unavailable", agent_id=spec.id, reason=str(exc))
            infos[spec.id] = _info(spec, settings, budget, [], frozenset(), str(exc))
            continue
        system_prompt = spec.system_prompt or settings.agent.system_prompt
        # ``preflight`` refused static misfits at start (budgets built in code, as the tests do,
        # are the caller's); an MCP server's tool schemas arrive only now, so check those here.
        misfit = spec.mcp_servers and agent_budget_misfit(
            Budget.of(budget), system_message=system_prompt, tools=tools, agent=spec.id
        )
        if misfit:
            log.error("agent_unavailable", agent_id=spec.id, reason=misfit)
            infos[spec.id] = _info(spec, settings, budget, [], frozenset(), misfit)
            continue
        compressor = ContextCompressor.from_settings(
            budget, summarizer=_summarizer(spec, settings, budget, summarizer), workdir=workdir
        )
        runtime = build_agent_runtime(
            model=model or _model(spec, settings),
            provider_middleware=_provider_middleware(spec, settings),
            model_name="" if model else model_name(spec.model, settings),
            tools=tools,
            compressor=compressor,
            system_prompt=system_prompt,
            checkpointer=checkpointer,
            approval_tools=approvals,
            recursion_limit=spec.recursion_limit,
            agent_id=spec.id,
        )
        runtimes[spec.id] = runtime
        infos[spec.id] = _info(spec, settings, budget, tools, approvals, None)
    state_graph = create_agent(model=ExtractiveChatModel(), tools=[], checkpointer=checkpointer)
    return AgentRegistry(runtimes, infos, state_graph)


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
        _provider_middleware(spec, settings)
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


def _api_key(spec: AgentSpec) -> str | None:
    if not spec.api_key_env:
        return None
    value = os.environ.get(spec.api_key_env)
    if not value:
        raise AgentsFileError(
            f"agent {spec.id!r}: field 'api_key_env': environment variable "
            f"{spec.api_key_env} is not set"
        )
    return value


def _provider_model(spec: AgentSpec, which: str, settings: Settings) -> BaseChatModel:
    try:
        return init_provider_model(
            which,
            base_url=spec.base_url or None,
            api_key=_api_key(spec),
            timeout=settings.models.llm_timeout_seconds,
        )
    except AgentsFileError:
        raise
    except Exception as exc:  # unknown provider, its package missing, bad arguments
        field = (
            "model"
            if which == spec.model
            else "fallback_models"
            if which in spec.fallback_models
            else "summarizer"
        )
        raise AgentsFileError(
            f"agent {spec.id!r}: field '{field}': {which!r} cannot be built "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
        ) from exc


def _model(spec: AgentSpec, settings: Settings) -> BaseChatModel:
    if spec.model == OFFLINE or (not spec.model and not settings.models.llm_base_url):
        return ExtractiveChatModel(kb_tool_name=spec.offline_lookup_tool)
    if not spec.model:
        return build_chat_model(settings.models)
    return _provider_model(spec, spec.model, settings)


def _provider_middleware(spec: AgentSpec, settings: Settings) -> list[Any]:
    """The agent's fallback models and retries (app/agents/resilience.py)."""
    fallbacks = [_provider_model(spec, which, settings) for which in spec.fallback_models]
    return provider_middleware(
        settings.models,
        model=model_name(spec.model, settings),
        fallbacks=fallbacks,
        max_concurrency=spec.max_concurrency,
    )


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
    return llm_summarizer(_provider_model(spec, which, settings), budget)


# --- tools --------------------------------------------------------------------------------------
async def _tools(
    spec: AgentSpec,
    settings: Settings,
    search_kb: KbSearch,
    workdir: Workdir,
    base_dir: Path | None,
) -> list[BaseTool]:
    tools = _static_tools(spec, settings, search_kb, workdir)
    if spec.mcp_servers:
        tools.extend(await load_mcp_tools(spec.mcp_servers, base_dir=base_dir))
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
