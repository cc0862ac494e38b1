"""The acceptance graph (issue 33): a plain ``create_agent`` graph as LangGraph users write
one, nothing of Threadkeeper in it, served by ``langgraph dev`` and by Threadkeeper from the
same ``langgraph.json``. A scripted chat model streams its answers word by word; a safe tool
(``lookup_record``) and ``delete_record`` behind ``HumanInTheLoopMiddleware``."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool

RECORDS = {"r1": "Ada Lovelace, account opened 1843", "r2": "Alan Turing, account opened 1936"}


@tool
def lookup_record(record_id: str) -> str:
    """Read one customer record by id (safe: changes nothing)."""
    return RECORDS.get(record_id, f"no record {record_id}")


@tool
def delete_record(record_id: str) -> str:
    """Delete one customer record by id (waits for a human's approval)."""
    return f"deleted {record_id}"


def _reply(messages: Sequence[BaseMessage]) -> AIMessage:
    """What the script says next: a tool call for "look up rN" / "delete rN", the tool's result
    after it, else an echo."""
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return AIMessage(content=f"Done: {last.content}")
    text = str(last.content if isinstance(last, HumanMessage) else "")
    found = re.search(r"\b(look up|delete) (r\d+)", text)
    if found:
        name = "lookup_record" if found.group(1) == "look up" else "delete_record"
        call = {
            "name": name,
            "args": {"record_id": found.group(2)},
            "id": f"call_{uuid.uuid4().hex[:8]}",
        }
        return AIMessage(content="", tool_calls=[call])
    return AIMessage(content=f"You said: {text}")


class ScriptedChatModel(BaseChatModel):
    """Deterministic, streams word tokens (one chunk per word), takes any tools."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=_reply(messages))])

    def _chunks(self, messages: list[BaseMessage]) -> Iterator[ChatGenerationChunk]:
        reply = _reply(messages)
        message_id = f"run-{uuid.uuid4()}"
        if reply.tool_calls:
            call = reply.tool_calls[0]
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content="",
                    id=message_id,
                    tool_call_chunks=[
                        {
                            "name": call["name"],
                            "args": json.dumps(call["args"]),
                            "id": call["id"],
                            "index": 0,
                        }
                    ],
                )
            )
            return
        words = str(reply.content).split(" ")
        for i, word in enumerate(words):
            piece = word if i == len(words) - 1 else word + " "
            yield ChatGenerationChunk(message=AIMessageChunk(content=piece, id=message_id))

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages):
            if run_manager is not None:
                run_manager.on_llm_new_token(str(chunk.message.content), chunk=chunk)
            yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages):
            if run_manager is not None:
                await run_manager.on_llm_new_token(str(chunk.message.content), chunk=chunk)
            yield chunk


graph = create_agent(
    model=ScriptedChatModel(),
    tools=[lookup_record, delete_record],
    system_prompt="You manage customer records.",
    middleware=[HumanInTheLoopMiddleware(interrupt_on={"delete_record": True})],
)
