"""Tool schemas converted once per tool object at the model boundary, and only then reused."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import BaseTool, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver

from app.agents.middlewares.boundary import BoundaryMiddleware, ToolSchemas
from app.offline.extractive import ExtractiveChatModel


def _kb_tool(description: str) -> BaseTool:
    @tool("query_kb", description=description)
    async def query_kb(query: str, limit: int = 8) -> str:
        return '{"count": 0, "results": []}'

    return query_kb


class _RecordingModel(ExtractiveChatModel):
    """The offline model, keeping what each bind received."""

    bound: ClassVar[list[list[Any]]] = []

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        self.bound.append(list(tools))
        return super().bind_tools(tools, **kwargs)


def test_schemas_are_the_converted_ones_reused_until_the_tool_changes() -> None:
    schemas = ToolSchemas()
    first = _kb_tool("Search the knowledge base.")
    passthrough = {"type": "function", "function": {"name": "x", "parameters": {}}}
    out = schemas([first, passthrough])
    assert out[0] == convert_to_openai_tool(first) and out[1] is passthrough
    assert schemas([first])[0] is out[0]  # converted once
    # A rebuilt agent: a new tool object of the same name gets its own schema.
    second = _kb_tool("Search the other knowledge base.")
    again = schemas([second])[0]
    assert again is not out[0]
    assert again["function"]["description"] == "Search the other knowledge base."
    # The same object changed in place is converted again.
    second.description = "Changed."
    assert schemas([second])[0]["function"]["description"] == "Changed."


async def test_the_model_is_bound_with_the_same_schemas_as_before_on_every_call() -> None:
    kb = _kb_tool("Search the knowledge base.")
    model = _RecordingModel()
    model.bound.clear()
    agent = create_agent(
        model=model, tools=[kb], middleware=[BoundaryMiddleware()], checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "t"}}
    await agent.ainvoke({"messages": [HumanMessage("What about leases?")]}, config)
    await agent.ainvoke({"messages": [HumanMessage("And heartbeats?")]}, config)
    assert len(model.bound) == 4  # tool call + answer, twice
    assert all(bound == [convert_to_openai_tool(kb)] for bound in model.bound)
    assert all(bound[0] is model.bound[0][0] for bound in model.bound)  # converted once
    # The model called the tool by its bound name each turn (the schema reached it).
    state = await agent.aget_state(config)
    assert [m.type for m in state.values["messages"]].count("tool") == 2
