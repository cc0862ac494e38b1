"""Assistants are the registered agents (``AgentRegistry``): ``assistant_id`` and ``graph_id``
are the agent id (shown by ``app/api/langgraph/presenters``)."""

from __future__ import annotations

from typing import Any

from app.agents.info import AgentInfo
from app.agents.registry import AgentRegistry
from app.domain.errors import NotFound


def find_agent(registry: AgentRegistry, agent_id: str) -> AgentInfo:
    found = registry.info(agent_id)
    if found is None:
        raise NotFound(f"assistant {agent_id!r} not found")
    return found


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
