"""The registered agents: ``AgentRegistry`` is the one accessor for "the registered agents"
(``infos()``/``info(id)``: what GetAgent shows) and for "the runtime of this thread's agent"
(``runtime(agent_id)``). ``app.agents.assembly`` builds it.

An agent whose MCP server cannot be reached (at start, or later) is *unavailable* (the reason
in ``info(id).unavailable_reason``; new runs of its threads refused by ``require_available``)
and started again with backoff (``app.agents.recovery``); one that left the file is unavailable
for good. Neither stops the service.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import structlog
from langchain_core.tools import BaseTool

from app.agents.graph import AgentRuntime
from app.agents.info import AgentInfo
from app.agents.mcp import McpServer
from app.agents.provider_http import SharedHttpClient
from app.agents.recovery import Recovery
from app.domain.agents import DEFAULT_AGENT_ID
from app.domain.errors import AgentUnavailable, UnknownAgent
from app.repositories.agent_state import AgentStateRepository

__all__ = ["AgentRegistry", "removed_reason"]

log = structlog.get_logger(__name__)


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
        #: The HTTP client of its OpenAI-protocol models (closed by ``close``).
        self.http = SharedHttpClient()

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
        """Stop retrying, stop every MCP server this process started, close the models' HTTP
        connections."""
        if self.recovery is not None:
            await self.recovery.close()
        for server in self.mcp_servers:
            await server.close()
        await self.http.aclose()

    @property
    def default_id(self) -> str:
        """The agent a new thread gets when it names none: ``default`` if registered, else the
        first agent of the file."""
        return DEFAULT_AGENT_ID if DEFAULT_AGENT_ID in self._infos else next(iter(self._infos))

    def infos(self) -> list[AgentInfo]:
        return list(self._infos.values())

    def info(self, agent_id: str) -> AgentInfo | None:
        return self._infos.get(agent_id)

    def queueing_agents(self) -> list[str]:
        """The agents whose input waits behind an interrupted run (``on_input_while_interrupted
        = "queue"``); every other agent's input supersedes it."""
        return [i.id for i in self._infos.values() if i.on_input_while_interrupted == "queue"]

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

    def state_of(self, agent_id: str) -> AgentStateRepository:
        """A thread's state read through its agent's own graph (its nodes and state keys: a
        graph of the user's own names them as it likes); the generic graph when the agent
        cannot run now (its checkpoint's messages are still readable)."""
        found = self._runtimes.get(agent_id)
        return found.state() if found is not None else AgentStateRepository(self.state_graph)

    def is_graph(self, agent_id: str) -> bool:
        """Whether the agent serves a graph of the user's own (available or not)."""
        info = self._infos.get(agent_id)
        return info is not None and info.own_graph

    def own_graph(self, agent_id: str) -> Any:
        """The compiled graph of an agent that serves a graph of the user's own (what the
        LangGraph door draws and describes); None for an assembled or unavailable agent."""
        found = self._runtimes.get(agent_id)
        return found.graph if found is not None and found.own_graph else None

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
