"""Assistants are the configured agents: THE one function that lists them for this surface.

Until the agent registry (issue 19) lands, the service knows one agent, ``default``; swapping in
the registry changes only ``known_agents``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from app.agents.registry import AgentRegistry
from app.domain.errors import NotFound

#: Assistants have no lifecycle of their own (they are configuration): one fixed timestamp.
_EPOCH = datetime(2025, 1, 1, tzinfo=UTC).isoformat()


@dataclass(frozen=True, slots=True)
class AgentInfo:
    agent_id: str
    name: str
    description: str


def known_agents(registry: AgentRegistry) -> list[AgentInfo]:
    """Every agent this service runs: the agent registry's (issue 19), in its order."""
    return [AgentInfo(i.id, i.name, i.description) for i in registry.infos()]


def find_agent(registry: AgentRegistry, agent_id: str) -> AgentInfo:
    for agent in known_agents(registry):
        if agent.agent_id == agent_id:
            return agent
    raise NotFound(f"assistant {agent_id!r} not found")


def assistant_json(agent: AgentInfo) -> dict[str, Any]:
    """LangGraph's Assistant: ``assistant_id`` and ``graph_id`` are both the agent id."""
    return {
        "assistant_id": agent.agent_id,
        "graph_id": agent.agent_id,
        "name": agent.name,
        "description": agent.description,
        "config": {},
        "context": {},
        "metadata": {},
        "version": 1,
        "created_at": _EPOCH,
        "updated_at": _EPOCH,
    }


def search_agents(
    registry: AgentRegistry,
    *,
    graph_id: str | None,
    name: str | None,
    metadata: dict[str, Any] | None,
) -> list[AgentInfo]:
    """AssistantSearch's filters; agents carry no metadata, so any metadata filter matches none."""
    found = known_agents(registry)
    if graph_id:
        found = [a for a in found if a.agent_id == graph_id]
    if name:
        found = [a for a in found if name.lower() in a.name.lower()]
    if metadata:
        found = []
    return found


#: The graph's input/output: LangGraph's MessagesState (what the UI renders).
MESSAGES_STATE_SCHEMA: dict[str, Any] = {
    "title": "MessagesState",
    "type": "object",
    "properties": {"messages": {"type": "array", "items": {"type": "object"}}},
    "required": ["messages"],
}


def schemas_json(agent: AgentInfo) -> dict[str, Any]:
    return {
        "graph_id": agent.agent_id,
        "input_schema": MESSAGES_STATE_SCHEMA,
        "output_schema": MESSAGES_STATE_SCHEMA,
        "state_schema": MESSAGES_STATE_SCHEMA,
        "config_schema": {"title": "Config", "type": "object", "properties": {}},
        "context_schema": {"title": "Context", "type": "object", "properties": {}},
    }


def graph_json() -> dict[str, Any]:
    """The agent loop as LangGraph draws it: model <-> tools."""
    nodes = ["__start__", "model", "tools", "__end__"]
    edges = [
        ("__start__", "model", False),
        ("model", "tools", True),
        ("tools", "model", False),
        ("model", "__end__", True),
    ]
    return {
        "nodes": [{"id": n, "type": "runnable", "data": n} for n in nodes],
        "edges": [{"source": s, "target": t, "conditional": c} for s, t, c in edges],
    }
