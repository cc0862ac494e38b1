"""The guards at the model and tool boundaries: one middleware, innermost (nearest the model
and the tools), so each model call and each tool call goes through one hook (``create_agent``
traces each hook of each middleware on every call).

Storable output: what a provider or a tool returns is made storable (``app.compression.storable``)
before the graph puts it in the checkpoint, so the model view, the full history and the events
hold the same text and no write can fail on it.

Tool-result guard: a provider refuses (HTTP 400) a request in which an assistant tool call has
no tool result after it. The worker repairs the stored state before a run; this guard is the
last line for any path that still reaches the model with one (a retry after a lost connection,
a view a middleware rebuilt): the request gets an explicit "result unknown" answer for each
such call, and the server log says so.

Tool schemas: ``create_agent`` binds the request's tools on every model call, and binding
converts each ``BaseTool`` to its OpenAI-format schema again; the request leaves this middleware
with each tool's schema converted once per tool object (a rebuilt agent has new tool objects, so
new schemas), which every chat model's ``bind_tools`` takes as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog
from langchain.agents.middleware import (
    AgentMiddleware,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
)
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.types import Command

from app.compression.storable import storable_message, storable_value

log = structlog.get_logger(__name__)

#: The tool result of a call whose run ended before its result was recorded: the tool may
#: have run (and had its effects), so the model must not assume either way.
RESULT_UNKNOWN = (
    "Result unknown: the run that requested this tool call ended before its result was "
    "recorded. The tool may have run; check before repeating anything with side effects."
)
#: The tool result of a call that waited for approval when its run was cancelled.
NOT_APPROVED = "Not executed: the run was cancelled while this tool call waited for approval."
#: The tool result of a call that waited for approval when new input superseded its run.
SUPERSEDED_CALL = (
    "cancelled: the user sent a new message instead (this tool call was waiting for approval "
    "and was not run)"
)


def dangling_tool_calls(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """Tool calls of AI messages that never got a ToolMessage (a run died between the two)."""
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    pending: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, AIMessage):
            for call in m.tool_calls:
                if call.get("id") and call["id"] not in answered:
                    pending.append({"id": call["id"], "name": call["name"]})
    return pending


def unanswered_result(call: dict[str, Any], content: str = RESULT_UNKNOWN) -> ToolMessage:
    """The explicit answer to a tool call whose result does not exist (one id per call)."""
    return ToolMessage(
        content=content,
        tool_call_id=call["id"],
        name=call["name"],
        status="error",
        id=f"repair-{call['id']}",
    )


def answer_tool_calls(messages: Sequence[AnyMessage]) -> tuple[list[AnyMessage], list[str]]:
    """``messages`` with a ``RESULT_UNKNOWN`` tool result placed after every assistant tool call
    that the tool messages following it do not answer; and the ids of those calls."""
    out: list[AnyMessage] = []
    added: list[str] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        out.append(message)
        i += 1
        if not (isinstance(message, AIMessage) and message.tool_calls):
            continue
        answered: set[str] = set()
        while i < len(messages) and isinstance(messages[i], ToolMessage):
            answered.add(messages[i].tool_call_id)  # type: ignore[union-attr]
            out.append(messages[i])
            i += 1
        for call in message.tool_calls:
            if call.get("id") and call["id"] not in answered:
                out.append(unanswered_result(dict(call)))
                added.append(str(call["id"]))
    return out, added


def _storable_response(response: Any) -> Any:
    if isinstance(response, ExtendedModelResponse):
        return dataclasses.replace(
            response, model_response=_storable_response(response.model_response)
        )
    if isinstance(response, ModelResponse):
        return dataclasses.replace(response, result=[storable_message(m) for m in response.result])
    if isinstance(response, BaseMessage):
        return storable_message(response)
    return response


class ToolSchemas:
    """The OpenAI-format schema of each tool, converted once per tool object (and again if
    its name or description changed); anything else (a schema already) passes through."""

    #: More distinct tools than any agent has: past this the cache starts over.
    MAX_TOOLS = 512

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[BaseTool, str, str, dict[str, Any]]] = {}

    def __call__(self, tools: Sequence[Any]) -> list[Any]:
        out: list[Any] = []
        for tool in tools:
            if not isinstance(tool, BaseTool):
                out.append(tool)
                continue
            hit = self._by_id.get(id(tool))
            if hit is None or hit[0] is not tool or hit[1:3] != (tool.name, tool.description):
                if len(self._by_id) >= self.MAX_TOOLS:
                    self._by_id.clear()
                hit = (tool, tool.name, tool.description, convert_to_openai_tool(tool))
                self._by_id[id(tool)] = hit
            out.append(hit[3])
        return out


class BoundaryMiddleware(AgentMiddleware):
    """No model request leaves with an assistant tool call that has no tool result; tools go
    to the model as schemas converted once; model replies and tool results are made storable
    before anything writes them."""

    def __init__(self) -> None:
        super().__init__()
        self.tool_schemas = ToolSchemas()

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        messages, added = answer_tool_calls(request.messages)
        if added:
            log.warning("unanswered_tool_calls_answered", tool_call_ids=added)
        request = request.override(
            messages=messages if added else request.messages,
            tools=self.tool_schemas(request.tools),
        )
        return _storable_response(await handler(request))  # type: ignore[no-any-return]

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        result = await handler(request)
        if isinstance(result, ToolMessage):
            return storable_message(result)
        if isinstance(result, Command) and isinstance(result.update, dict):
            update = dict(result.update)
            if isinstance(update.get("messages"), list):
                update["messages"] = [
                    storable_message(m) if isinstance(m, BaseMessage) else storable_value(m)
                    for m in update["messages"]
                ]
            return dataclasses.replace(result, update=update)
        return result
