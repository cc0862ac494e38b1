"""The registered agents (ListAgents, GetAgent): what each runs with, never a key or a URL."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, get
from litestar.di import NamedDependency
from litestar.params import Parameter

from app.agents.info import AgentInfo
from app.agents.registry import AgentRegistry
from app.api.errors import errors
from app.api.schemas import AgentBudget, AgentList, AgentOut, AgentTool
from app.domain.errors import NotFound

AGENT_ID = r"^[A-Za-z0-9_.-]{1,100}$"


def agent_out(info: AgentInfo) -> AgentOut:
    b = info.budget
    return AgentOut(
        id=info.id,
        name=info.name,
        description=info.description,
        model=info.model,
        summarizer=info.summarizer,
        knowledge_base=info.knowledge_base,
        capabilities=list(info.capabilities),
        budget=AgentBudget(
            summary_threshold=b.summary_threshold,
            tool_result_preview_tokens=b.tool_result_preview_tokens,
            summary_keep_recent_tokens=b.summary_keep_recent_tokens,
            summary_max_tokens=b.summary_max_tokens,
            summary_timeout_seconds=b.summary_timeout_seconds,
        ),
        recursion_limit=info.recursion_limit,
        tools=[
            AgentTool(
                name=t.name,
                description=t.description,
                parameters=t.parameters,
                needs_approval=t.needs_approval,
            )
            for t in info.tools
        ],
        available=info.available,
        unavailable_reason=info.unavailable_reason,
    )


class AgentController(Controller):
    path = "/v1/agents"
    tags = ["agents"]

    @get("/", operation_id="ListAgents", responses=errors())
    async def list_agents(self, agent_registry: NamedDependency[AgentRegistry]) -> AgentList:
        return AgentList(
            items=[agent_out(i) for i in agent_registry.infos()],
            default_agent_id=agent_registry.default_id,
        )

    @get("/{agent_id:str}", operation_id="GetAgent", responses=errors(NotFound))
    async def get_agent(
        self,
        agent_id: Annotated[str, Parameter(pattern=AGENT_ID)],
        agent_registry: NamedDependency[AgentRegistry],
    ) -> AgentOut:
        info = agent_registry.info(agent_id)
        if info is None:
            raise NotFound(f"no agent {agent_id!r} is registered")
        return agent_out(info)
