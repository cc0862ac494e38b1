"""What GetAgent, ListAgents and the LangGraph door's assistants show of an agent: its
``AgentInfo`` (no base URL, no key, no environment), built from its spec and assembled tools."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from app.agents.models import model_name
from app.agents.spec import MANUAL_COMPRESSION, AgentSpec
from app.config import CompressionSettings, Settings

__all__ = ["AgentInfo", "ToolInfo", "agent_info"]


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
    #: ``supersede`` or ``queue`` (``AgentSpec.on_input_while_interrupted``).
    on_input_while_interrupted: str = "supersede"
    #: It serves a graph of the user's own (``graph``), not one Threadkeeper assembles.
    own_graph: bool = False

    @property
    def available(self) -> bool:
        return self.unavailable_reason is None

    @property
    def manual_compression(self) -> bool:
        return MANUAL_COMPRESSION in self.capabilities


def agent_info(
    spec: AgentSpec,
    settings: Settings,
    budget: CompressionSettings,
    tools: list[BaseTool],
    approvals: frozenset[str],
    unavailable: str | None,
    opted_in: bool = True,
) -> AgentInfo:
    return AgentInfo(
        id=spec.id,
        name=spec.display_name,
        description=spec.description,
        model=f"graph:{spec.graph}" if spec.graph else model_name(spec.model, settings),
        summarizer=model_name(spec.summarizer or spec.model, settings),
        knowledge_base=spec.knowledge_base,
        capabilities=spec.capabilities_for(opted_in),
        budget=budget,
        recursion_limit=spec.recursion_limit,
        tools=tuple(_tool_info(t, approvals) for t in tools),
        unavailable_reason=unavailable,
        on_input_while_interrupted=spec.on_input_while_interrupted,
        own_graph=bool(spec.graph),
    )


def _tool_info(tool: BaseTool, approvals: frozenset[str]) -> ToolInfo:
    function = convert_to_openai_tool(tool)["function"]
    return ToolInfo(
        name=tool.name,
        description=str(function.get("description") or ""),
        parameters=dict(function.get("parameters") or {}),
        needs_approval=tool.name in approvals,
    )
