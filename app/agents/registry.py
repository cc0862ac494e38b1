"""The registered agents: ``AgentRegistry`` is the one accessor for "the registered agents"
(``infos()``/``info(id)``: what GetAgent shows) and for "the runtime of this thread's agent"
(``runtime(agent_id)``). ``app.agents.assembly`` builds it.

An agent whose MCP server could not be reached at start is registered but *unavailable* (its
reason in ``info(id).unavailable_reason``; its threads' runs fail with ``agent_unavailable``);
a thread whose agent left the file is treated the same way. Neither stops the service.
"""

from __future__ import annotations

from typing import Any

from langchain_core.tools import BaseTool

from app.agents.graph import AgentRuntime
from app.agents.info import AgentInfo
from app.domain.agents import DEFAULT_AGENT_ID
from app.domain.errors import AgentUnavailable, UnknownAgent

__all__ = ["AgentRegistry", "removed_reason"]


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
