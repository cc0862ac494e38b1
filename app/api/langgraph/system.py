"""/info, /ok, the assistants (= configured agents), and what this surface does not serve."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, get, post, route
from litestar.di import NamedDependency
from litestar.status_codes import HTTP_200_OK

from app.agents.registry import AgentRegistry
from app.api.error_declarations import errors
from app.api.langgraph.presenters import assistant_out, graph_out, schemas_out
from app.api.langgraph.responses import (
    AssistantOut,
    AssistantSchemasOut,
    GraphOut,
    InfoFlags,
    InfoHost,
    InfoOut,
    OkOut,
)
from app.api.langgraph.schemas import AssistantCountIn, AssistantSearchIn
from app.domain.errors import NotFound, NotImplementedHere
from app.services.langgraph.assistants import find_agent, search_agents

VERSION = "0.1.0"


@get("/info", operation_id="LangGraphInfo", tags=["system"])
async def info() -> InfoOut:
    """What Agent Chat UI calls on every load (no key needed, like LangGraph's server)."""
    return InfoOut(
        version=VERSION,
        langgraph_py_version=None,
        flags=InfoFlags(assistants=True, crons=False, langsmith=False),
        host=InfoHost(kind="threadkeeper"),
    )


@get("/ok", operation_id="LangGraphOk", tags=["system"])
async def ok() -> OkOut:
    return OkOut(ok=True)


@route(
    [
        "/runs",
        "/runs/{rest:path}",
        "/store/{rest:path}",
        "/threads/{thread_id:str}/copy",
        "/threads/{thread_id:str}/runs/crons",
        "/assistants",
        "/assistants/{assistant_id:str}/versions",
        "/assistants/{assistant_id:str}/latest",
    ],
    http_method=["GET", "POST", "PUT", "PATCH", "DELETE"],
    operation_id="LangGraphNotSupported",
    tags=["system"],
    include_in_schema=False,
)
async def not_supported(request: Request[Any, Any, Any]) -> None:
    """Crons, the store, stateless runs, thread copies and assistant writes (assistants are
    the configured agents) are not part of Threadkeeper."""
    raise NotImplementedHere(
        f"{request.method} {request.url.path} is not supported by Threadkeeper's LangGraph API "
        "(no crons, store, stateless runs, thread copies or assistant changes: assistants are "
        "the configured agents); see the support table in docs/langgraph.md"
    )


class AssistantController(Controller):
    path = "/assistants"
    tags = ["assistants"]

    @post("/search", operation_id="SearchAssistants", status_code=HTTP_200_OK)
    async def search(
        self, data: AssistantSearchIn, agent_registry: NamedDependency[AgentRegistry]
    ) -> list[AssistantOut]:
        found = search_agents(
            agent_registry, graph_id=data.graph_id, name=data.name, metadata=data.metadata
        )
        return [assistant_out(a) for a in found[data.offset : data.offset + data.limit]]

    @post("/count", operation_id="CountAssistants", status_code=HTTP_200_OK)
    async def count(
        self, data: AssistantCountIn, agent_registry: NamedDependency[AgentRegistry]
    ) -> int:
        return len(
            search_agents(
                agent_registry, graph_id=data.graph_id, name=data.name, metadata=data.metadata
            )
        )

    @get("/{assistant_id:str}", operation_id="GetAssistant", responses=errors(NotFound))
    async def get_assistant(
        self, assistant_id: str, agent_registry: NamedDependency[AgentRegistry]
    ) -> AssistantOut:
        return assistant_out(find_agent(agent_registry, assistant_id))

    @get(
        "/{assistant_id:str}/schemas",
        operation_id="GetAssistantSchemas",
        responses=errors(NotFound),
    )
    async def get_schemas(
        self, assistant_id: str, agent_registry: NamedDependency[AgentRegistry]
    ) -> AssistantSchemasOut:
        agent = find_agent(agent_registry, assistant_id)
        return schemas_out(agent, agent_registry.own_graph(agent.id))

    @get("/{assistant_id:str}/graph", operation_id="GetAssistantGraph", responses=errors(NotFound))
    async def get_graph(
        self, assistant_id: str, agent_registry: NamedDependency[AgentRegistry]
    ) -> GraphOut:
        find_agent(agent_registry, assistant_id)
        return graph_out(agent_registry.own_graph(assistant_id))
