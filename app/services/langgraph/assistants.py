"""Assistants are the registered agents (``AgentRegistry``), each shown as LangGraph's
Assistant from its one ``AgentInfo``: ``assistant_id`` and ``graph_id`` are the agent id."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from app.agents.info import AgentInfo
from app.agents.registry import AgentRegistry
from app.domain.errors import NotFound

#: Assistants have no lifecycle of their own (they are configuration): one fixed timestamp.
_EPOCH = datetime(2025, 1, 1, tzinfo=UTC).isoformat()


def find_agent(registry: AgentRegistry, agent_id: str) -> AgentInfo:
    found = registry.info(agent_id)
    if found is None:
        raise NotFound(f"assistant {agent_id!r} not found")
    return found


def assistant_json(agent: AgentInfo) -> dict[str, Any]:
    """LangGraph's Assistant: ``assistant_id`` and ``graph_id`` are both the agent id."""
    return {
        "assistant_id": agent.id,
        "graph_id": agent.id,
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
    found = registry.infos()
    if graph_id:
        found = [a for a in found if a.id == graph_id]
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


def schemas_json(agent: AgentInfo, graph: Any = None) -> dict[str, Any]:
    """The assembled agent's MessagesState; a graph of the user's own describes itself."""
    if graph is not None:
        return {
            "graph_id": agent.id,
            "input_schema": graph.get_input_jsonschema(),
            "output_schema": graph.get_output_jsonschema(),
            "state_schema": graph.get_output_jsonschema(),
            "config_schema": {"title": "Config", "type": "object", "properties": {}},
            "context_schema": graph.get_context_jsonschema(),
        }
    return {
        "graph_id": agent.id,
        "input_schema": MESSAGES_STATE_SCHEMA,
        "output_schema": MESSAGES_STATE_SCHEMA,
        "state_schema": MESSAGES_STATE_SCHEMA,
        "config_schema": {"title": "Config", "type": "object", "properties": {}},
        "context_schema": {"title": "Context", "type": "object", "properties": {}},
    }


def graph_json(graph: Any = None) -> dict[str, Any]:
    """The agent loop as LangGraph draws it: model <-> tools; a graph of the user's own as
    LangGraph draws it."""
    if graph is not None:
        drawn: dict[str, Any] = graph.get_graph().to_json()
        return drawn
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
