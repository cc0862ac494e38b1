"""What an agent is, as configuration: the agents file (``THREADKEEPER_AGENTS_FILE``) and its checks.

Pure data and validation, no model or tool is built here (``app.agents.registry`` assembles).
The file is TOML (``tomllib``) or JSON (by extension), a list of ``agents``; every entry is
either an ``AgentSpec`` table or ``{factory = "package.module:function"}``, a Python callable
returning an ``AgentSpec`` (or a mapping of the same fields). A file that cannot work is refused
at start with ONE line naming the agent and the field (``AgentsFileError``; exit 2).
Without the file there is one agent, ``default``, built from the ``THREADKEEPER_*`` settings
exactly as before registries existed.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from app.agents.langgraph_config import (
    LangGraphConfigError,
    is_langgraph_config,
    langgraph_entries,
)
from app.compression.tool_names import BUILTIN_TOOLS, QUERY_KB
from app.config import CompressionSettings, Settings
from app.domain.agents import DEFAULT_AGENT_ID

#: The capability that lets a thread's context be compressed on request (CompressContext).
MANUAL_COMPRESSION = "manual_compression"
CAPABILITIES: frozenset[str] = frozenset({MANUAL_COMPRESSION})
#: ``model`` value of the offline extractive model (and summarizer).
OFFLINE = "offline"
#: The agent a thread gets when it names none, and the only one without a file.

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
_GRAPH_PATH = re.compile(r"(?:[^:]+\.py|[A-Za-z_][\w.]*):[A-Za-z_][\w.]*")
_PROVIDER_MODEL = re.compile(r"[A-Za-z0-9_-]+:.+")
_AT = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")


class AgentsFileError(ValueError):
    """The agents file cannot work; ``str()`` is the one line printed before exit 2."""


class _Spec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class McpServerSpec(_Spec, frozen=True, kw_only=True):
    """One MCP server: ``command`` (stdio: argv, the first item the executable; ``python`` is
    the interpreter running Threadkeeper) or ``url`` (streamable HTTP). Its tools join the
    agent's under their own names."""

    name: str
    command: list[str] = []
    url: str = ""
    #: Extra environment of a stdio server (over the MCP SDK's minimal default one).
    env: dict[str, str] = {}
    #: Working directory of a stdio server (relative to the agents file).
    cwd: str = ""
    #: HTTP headers of a streamable-HTTP server.
    headers: dict[str, str] = {}


class BudgetSpec(_Spec, frozen=True, kw_only=True):
    """The agent's own compression budget; an unset field takes the ``THREADKEEPER_*`` value
    (the same fields as the settings' compression group)."""

    summary_threshold: int | None = None
    tool_result_preview_tokens: int | None = None
    summary_keep_recent_tokens: int | None = None
    summary_max_tokens: int | None = None
    summary_timeout_seconds: float | None = None


class AgentSpec(_Spec, frozen=True, kw_only=True):
    id: str
    name: str = ""
    description: str = ""
    #: A LangGraph graph of the user's own (``./path/file.py:attr`` relative to the agents file,
    #: or ``package.module:attr``; ``app.agents.own_graph``): served as it is, instead of the
    #: agent Threadkeeper assembles. Exclusive with the fields that assemble one
    #: (``GRAPH_EXCLUSIVE``); the budget, capabilities, summarizer and approval settings apply.
    graph: str = ""
    #: ``provider:model`` (LangChain ``init_chat_model``), ``offline`` (the extractive model),
    #: or empty: the deployment's ``THREADKEEPER_LLM_*`` settings (offline without a base URL).
    model: str = ""
    base_url: str = ""
    #: Name of the environment variable holding the model's API key (never the key itself).
    api_key_env: str = ""
    #: Models tried in order when ``model`` fails for good (after its retries), each
    #: ``provider:model`` with the agent's ``base_url`` and key (LangChain's
    #: ``ModelFallbackMiddleware``); a context overflow is summarized instead.
    fallback_models: list[str] = []
    #: Most calls to each of the agent's models in flight at once from one process (a worker
    #: waits for a free slot); unset: no cap.
    max_concurrency: int | None = None
    #: Summarizer model, same forms as ``model``; empty: the agent's model.
    summarizer: str = ""
    #: Empty: ``THREADKEEPER_SYSTEM_PROMPT``.
    system_prompt: str = ""
    #: Built-in tools by name (``app.compression.tool_names.BUILTIN_TOOLS``); unset: query_kb and
    #: the Workdir tools, plus web_search when ``THREADKEEPER_WEB_SEARCH_URL`` is set.
    tools: list[str] | None = None
    #: The knowledge base ``query_kb`` searches.
    knowledge_base: str = "default"
    #: Python tools: ``package.module:attribute`` naming a LangChain tool (or a list of them).
    python_tools: list[str] = []
    mcp_servers: list[McpServerSpec] = []
    #: Tools that wait for a human decision before they run; unset:
    #: ``THREADKEEPER_APPROVAL_TOOLS`` (names of tools the agent lacks ignored).
    approval_tools: list[str] | None = None
    recursion_limit: int = 40
    #: Unset: ``manual_compression`` for an assembled agent; for a ``graph``, when the graph
    #: opts in to Threadkeeper's compression (the public ``threadkeeper`` import).
    capabilities: list[str] | None = None
    compression: BudgetSpec = msgspec.field(default_factory=BudgetSpec)
    #: The tool the offline model calls with ``{"query": <the user's turn>}`` (default query_kb).
    offline_lookup_tool: str = QUERY_KB
    #: New input on a thread whose run waits for a human answer: ``supersede`` (the default)
    #: ends the waiting run (its pending tool calls answered as not run, a graph's own
    #: interrupt dropped) and runs the input; ``queue`` keeps it queued until the run is
    #: resumed or cancelled.
    on_input_while_interrupted: Literal["supersede", "queue"] = "supersede"

    @property
    def display_name(self) -> str:
        return self.name or self.id

    def capabilities_for(self, opted_in: bool = True) -> tuple[str, ...]:
        """The declared capabilities, else the default (``opted_in``: the agent's model calls
        go through Threadkeeper's compression, always true of an assembled agent)."""
        if self.capabilities is not None:
            return tuple(self.capabilities)
        return (MANUAL_COMPRESSION,) if (opted_in or not self.graph) else ()


#: The fields that assemble an agent, so none may stand beside ``graph``.
GRAPH_EXCLUSIVE = (
    "model",
    "base_url",
    "api_key_env",
    "fallback_models",
    "max_concurrency",
    "system_prompt",
    "tools",
    "python_tools",
    "mcp_servers",
    "approval_tools",
    "offline_lookup_tool",
)


class _FactoryEntry(_Spec, frozen=True, kw_only=True):
    factory: str


class _File(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    agents: list[dict[str, Any]]


def default_spec() -> AgentSpec:
    """Today's agent: every value from the settings (model, prompt, approvals, budget)."""
    return AgentSpec(id=DEFAULT_AGENT_ID, name="Default", description="The built-in agent.")


def budget_of(spec: AgentSpec, settings: Settings) -> CompressionSettings:
    """The agent's compression budget: its own fields over the ``THREADKEEPER_*`` ones."""
    merged = msgspec.to_builtins(settings.compression)
    merged.update({k: v for k, v in msgspec.to_builtins(spec.compression).items() if v is not None})
    try:
        return msgspec.convert(merged, CompressionSettings)
    except (msgspec.ValidationError, ValueError) as exc:
        # CompressionSettings names the variable ("THREADKEEPER_X must be > 0"); here the
        # field is the agent's: "field 'compression.x': must be > 0".
        text = str(exc)
        named = re.match(r"THREADKEEPER_([A-Z_]+) (.*)", text)
        if named:
            text = f"field 'compression.{named.group(1).lower()}': {named.group(2)}"
        raise AgentsFileError(f"agent {spec.id!r}: {text}") from exc


def load_agent_specs(settings: Settings) -> list[AgentSpec]:
    """The registered agents (validated, in file order); ``[default_spec()]`` without a file."""
    path = settings.agent.agents_file
    if not path:
        return [default_spec()]
    return load_agents_file(Path(path), settings)


def load_agents_file(path: Path, settings: Settings) -> list[AgentSpec]:
    """An agents file (``agents = [...]``), or a ``langgraph.json`` (each graph an agent)."""
    raw = _read(path)
    importable_from(path.parent)
    if is_langgraph_config(raw):
        try:
            entries = langgraph_entries(raw, path)
        except LangGraphConfigError as exc:
            raise AgentsFileError(str(exc)) from exc
    else:
        try:
            entries = msgspec.convert(raw, _File).agents
        except msgspec.ValidationError as exc:
            raise AgentsFileError(f"agents file {path}: {_field_message(exc, '')}") from exc
    if not entries:
        raise AgentsFileError(f"agents file {path}: field 'agents': no agent is defined")
    specs: list[AgentSpec] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        spec = _entry_spec(entry, index)
        if spec.id in seen:
            raise AgentsFileError(f"agent {spec.id!r}: field 'id': defined twice")
        seen.add(spec.id)
        check_spec(spec, settings, base=path.parent)
        specs.append(spec)
    return specs


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise AgentsFileError(f"agents file {path}: cannot be read ({exc.strerror})") from exc
    try:
        if path.suffix.lower() == ".json":
            return json.loads(text)
        return tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        kind = "JSON" if path.suffix.lower() == ".json" else "TOML"
        line = str(exc).splitlines()[0]
        raise AgentsFileError(f"agents file {path}: not valid {kind}: {line}") from exc


def _label(entry: Mapping[str, Any], index: int) -> str:
    agent_id = entry.get("id")
    return repr(agent_id) if isinstance(agent_id, str) and agent_id else f"#{index + 1}"


def _entry_spec(entry: dict[str, Any], index: int) -> AgentSpec:
    label = _label(entry, index)
    if "factory" in entry:
        return _from_factory(entry, label)
    try:
        return msgspec.convert(entry, AgentSpec)
    except msgspec.ValidationError as exc:
        raise AgentsFileError(f"agent {label}: {_field_message(exc, '')}") from exc


def _from_factory(entry: dict[str, Any], label: str) -> AgentSpec:
    try:
        target = msgspec.convert(entry, _FactoryEntry).factory
    except msgspec.ValidationError as exc:
        raise AgentsFileError(
            f"agent {label}: {_field_message(exc, '')} (a factory entry has only 'factory')"
        ) from exc
    made = import_object(target, f"agent {label}: field 'factory'")()
    if isinstance(made, AgentSpec):
        return made
    try:
        return msgspec.convert(made, AgentSpec)
    except msgspec.ValidationError as exc:
        raise AgentsFileError(
            f"agent {label}: factory {target} returned a bad spec: {_field_message(exc, '')}"
        ) from exc


def _field_message(exc: msgspec.ValidationError, prefix: str) -> str:
    """msgspec's "Expected `int`, got `str` - at `$.compression.x`" as "field 'compression.x': ..."."""
    text = str(exc)
    found = _AT.search(text)
    if found is None:
        missing = re.search(r"missing required field `(\w+)`", text)
        if missing:
            return f"field '{prefix}{missing.group(1)}': required"
        unknown = re.search(r"unknown field `(\w+)`", text)
        if unknown:
            return f"field '{prefix}{unknown.group(1)}': unknown field"
        return text
    path = found.group("path").replace("`", "")
    message = text[: found.start()]
    inner = re.search(r"(?:Object contains unknown field|missing required field) `(\w+)`", message)
    if inner:
        what = "unknown field" if "unknown" in message else "required"
        return f"field '{prefix}{path}.{inner.group(1)}': {what}"
    return f"field '{prefix}{path}': {message}"


def importable_from(folder: Path) -> None:
    """Let what an agents file names (``python_tools``, factories, and whatever those import)
    be imported from the file's own folder as well as ``sys.path``. Appended, so
    ``sys.path`` comes first: a ``json.py`` beside the file never shadows the standard one."""
    where = str(folder.resolve())
    if where not in sys.path:
        sys.path.append(where)


def import_object(target: str, where: str) -> Any:
    """``package.module:attribute`` -> the object, or ``AgentsFileError`` naming ``where``."""
    if not _IMPORT_PATH.fullmatch(target):
        raise AgentsFileError(f"{where}: {target!r} is not package.module:attribute")
    module_name, _, attribute = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure is a configuration error
        raise AgentsFileError(
            f"{where}: cannot import {module_name} ({type(exc).__name__}: {exc})"
        ) from exc
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise AgentsFileError(f"{where}: {module_name} has no attribute {attribute}")
        obj = getattr(obj, part)
    return obj


def check_spec(spec: AgentSpec, settings: Settings, *, base: Path | None = None) -> None:
    """Everything knowable without starting a model or a server; raises ``AgentsFileError``."""

    def bad(field: str, why: str) -> AgentsFileError:
        return AgentsFileError(f"agent {spec.id!r}: field '{field}': {why}")

    if not _ID.fullmatch(spec.id):
        raise bad("id", "letters, digits, '_', '.', '-' only (at most 100)")
    for field in ("model", "summarizer"):
        value = getattr(spec, field)
        if value and value != OFFLINE and not _PROVIDER_MODEL.fullmatch(value):
            raise bad(field, f"{value!r} is not 'offline' or provider:model")
    for value in spec.fallback_models:
        if not _PROVIDER_MODEL.fullmatch(value):
            raise bad("fallback_models", f"{value!r} is not provider:model")
    if spec.max_concurrency is not None and spec.max_concurrency < 1:
        raise bad("max_concurrency", "must be >= 1")
    if spec.api_key_env and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", spec.api_key_env):
        raise bad("api_key_env", "must be the NAME of an environment variable, not a key")
    for name in spec.tools or ():
        if name not in BUILTIN_TOOLS:
            raise bad(
                "tools", f"no built-in tool {name!r} (have {', '.join(sorted(BUILTIN_TOOLS))})"
            )
    _check_graph(spec)
    for capability in spec.capabilities or ():
        if capability not in CAPABILITIES:
            raise bad("capabilities", f"unknown capability {capability!r}")
    if spec.recursion_limit < 2:
        raise bad("recursion_limit", "must be >= 2")
    if not spec.knowledge_base:
        raise bad("knowledge_base", "must not be empty")
    for target in spec.python_tools:
        import_object(target, f"agent {spec.id!r}: field 'python_tools'")
    _check_mcp(spec, base)
    budget_of(spec, settings)


def _check_graph(spec: AgentSpec) -> None:
    """A ``graph`` agent names no field that assembles an agent (its graph has its own)."""
    if not spec.graph:
        return
    defaults = AgentSpec(id=spec.id)
    for field in GRAPH_EXCLUSIVE:
        if getattr(spec, field) != getattr(defaults, field):
            raise AgentsFileError(
                f"agent {spec.id!r}: field '{field}': not with 'graph' (the graph brings its own)"
            )
    if not _GRAPH_PATH.fullmatch(spec.graph):
        raise AgentsFileError(
            f"agent {spec.id!r}: field 'graph': {spec.graph!r} is not ./path/file.py:attr or "
            "package.module:attr"
        )


def _check_mcp(spec: AgentSpec, base: Path | None) -> None:
    names: set[str] = set()
    for i, server in enumerate(spec.mcp_servers):
        where = f"agent {spec.id!r}: field 'mcp_servers[{i}]"
        if not _ID.fullmatch(server.name) or server.name in names:
            raise AgentsFileError(f"{where}.name': missing, malformed or used twice")
        names.add(server.name)
        if bool(server.command) == bool(server.url):
            raise AgentsFileError(f"{where}': give exactly one of 'command' (stdio) or 'url'")
        if server.url and not server.url.startswith(("http://", "https://")):
            raise AgentsFileError(f"{where}.url': must be an http(s) URL (streamable HTTP)")


def mcp_transport(server: McpServerSpec) -> Literal["stdio", "streamable_http"]:
    return "stdio" if server.command else "streamable_http"
