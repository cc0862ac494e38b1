"""The graph's stream as a run follows it: the stream modes it needs, under the run's context."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.types import StreamMode

from app.agents import untraced
from app.agents.context import AgentContext
from app.agents.graph import AgentRuntime
from app.worker.claims import GraphOptions


def _own_context(runtime: AgentRuntime, options: GraphOptions) -> Any:
    """A graph of the user's own gets the run's ``context`` (``{}`` when it named none and the
    graph declares a ``context_schema``, as LangGraph's server gives it: the schema's
    defaults), coerced by LangGraph into its schema."""
    if options.context is not None:
        return options.context
    return {} if getattr(runtime.graph, "context_schema", None) is not None else None


async def graph_stream(
    runtime: AgentRuntime,
    graph_input: Any,
    config: RunnableConfig,
    context: AgentContext,
    options: GraphOptions,
) -> AsyncGenerator[tuple[str, Any], None]:
    untraced.apply()  # middleware hooks' trace set-up inline while tracing is off
    # An own graph's runtime context is its own (its context_schema: what the run's
    # ``context`` gave, coerced by LangGraph), not AgentContext; its state keys besides
    # ``messages`` are followed step by step (``values``).
    # Its updates and values show its output channels only (a middleware's private keys
    # left out), as LangGraph's server streams them; unless that would hide its messages
    # (the thread's history).
    modes = cast(list[StreamMode], ["updates", "custom", "messages", *options.stream_modes])
    own: dict[str, Any] = {}
    if runtime.own_graph:
        modes.append("values")
        channels = getattr(runtime.graph, "output_channels", None)
        if isinstance(channels, list) and "messages" in channels:
            own["output_keys"] = channels
    async for item in runtime.graph.astream(
        graph_input,
        config,
        context=_own_context(runtime, options) if runtime.own_graph else context,
        stream_mode=modes,
        **own,
    ):
        mode, chunk = item
        yield mode, chunk
