"""Graph assembly only: model + tools + middlewares, compiled with the PostgreSQL checkpointer."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware, ToolErrorMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import SystemMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph

from app.agents.context import AgentContext
from app.agents.middlewares.boundary import BoundaryMiddleware
from app.agents.provider_errors import endpoint_of
from app.agents.tools import tool_error_content
from app.compression.binding import GraphBinding
from app.compression.middleware import SummaryMiddleware
from app.compression.summary import ContextCompressor
from app.domain.agents import DEFAULT_AGENT_ID
from app.repositories.agent_state import AgentStateRepository


@dataclass
class AgentRuntime:
    """The compiled graph plus what the services need to reason about its context."""

    graph: CompiledStateGraph[Any, Any, Any, Any]
    compressor: ContextCompressor
    system_message: SystemMessage
    tools: list[BaseTool]
    recursion_limit: int = 40
    #: The registered agent this runtime is (``app.agents.registry``).
    agent_id: str = DEFAULT_AGENT_ID
    #: The model it calls (``provider:model``) and where (``host:port``; None: offline), for
    #: the server log of a failed run.
    model_name: str = ""
    endpoint: str | None = None
    #: A graph of the user's own (``app.agents.own_graph``), not one Threadkeeper assembled.
    own_graph: bool = False
    #: Its model calls go through Threadkeeper's compression (always, for an assembled agent).
    compression_opted_in: bool = True
    #: The nodes a state write is made "as" (``AgentStateRepository``): the assembled agent's
    #: ``model`` and ``tools``; None for an own graph (LangGraph picks the last writer).
    model_node: str | None = "model"
    tools_node: str | None = "tools"
    #: The agent's knowledge base search (lent to an own graph: ``threadkeeper``).
    search_kb: Any = None
    knowledge_base: str = "default"
    #: An own graph: the state keys its runs return (its output schema's; LangGraph's server
    #: leaves the others, e.g. a middleware's private keys, out of a run's ``values``).
    #: None: every key.
    output_keys: frozenset[str] | None = None

    def state(self) -> AgentStateRepository:
        """The thread state, read and written through this agent's graph."""
        return AgentStateRepository(
            self.graph, model_node=self.model_node, tools_node=self.tools_node
        )

    def binding(self, owner_id: str) -> GraphBinding | None:
        """What an own graph's run borrows (``app.compression.binding``); None for an
        assembled agent (its compression is built in)."""
        if not self.own_graph:
            return None
        search = None
        if self.search_kb is not None:
            kb, search_kb = self.knowledge_base, self.search_kb

            async def search(query: str, limit: int) -> dict[str, Any]:
                found: dict[str, Any] = await search_kb(
                    kb=kb, owner_id=owner_id, query=query, limit=limit
                )
                return found

        return GraphBinding(self.compressor, search)

    def config_for(self, thread_id: uuid.UUID | str) -> RunnableConfig:
        return {
            "configurable": {"thread_id": str(thread_id)},
            "recursion_limit": self.recursion_limit,
        }


def build_agent_runtime(
    *,
    model: BaseChatModel,
    tools: list[BaseTool],
    compressor: ContextCompressor,
    system_prompt: str,
    checkpointer: BaseCheckpointSaver[Any] | None,
    approval_tools: frozenset[str] = frozenset(),
    recursion_limit: int = 40,
    agent_id: str = DEFAULT_AGENT_ID,
    provider_middleware: Sequence[Any] = (),
    model_name: str = "",
) -> AgentRuntime:
    middleware: list[Any] = [SummaryMiddleware(compressor)]
    gated: dict[str, Any] = {
        name: True for name in approval_tools if any(t.name == name for t in tools)
    }
    if gated:
        middleware.append(HumanInTheLoopMiddleware(interrupt_on=gated))
    # A tool that raises answers the model with an error ToolMessage (sanitized);
    # interrupts and other graph signals still propagate.
    middleware.append(ToolErrorMiddleware(on_error=tool_error_content))
    # Fallback models and transient-failure retries (app/agents/resilience.py): inside the
    # summary middleware, so a context overflow still reaches it, and outside the boundary, so
    # every attempt sends the request as finally built.
    middleware.extend(provider_middleware)
    # Nearest the model and the tools (last = innermost): the request as finally sent has every
    # tool call answered, and what comes back is storable before the summary middleware, the
    # checkpoint or the worker see it.
    middleware.append(BoundaryMiddleware())
    system_message = SystemMessage(content=system_prompt)
    graph = create_agent(
        model=model,
        tools=tools,
        system_prompt=system_message,
        middleware=middleware,
        context_schema=AgentContext,
        checkpointer=checkpointer,
        name="threadkeeper",
    )
    return AgentRuntime(
        graph=graph,
        compressor=compressor,
        system_message=system_message,
        tools=tools,
        recursion_limit=recursion_limit,
        agent_id=agent_id,
        model_name=model_name or str(getattr(model, "model_name", "") or type(model).__name__),
        endpoint=endpoint_of(model),
    )
