"""The two compression methods ``benchmarks/compression.py`` compares and the agent loop they run
in: the shared settings, system prompt and tools, the counted deterministic summarizing chat model
both use, Threadkeeper's ``ContextCompressor`` and langchain's ``SummarizationMiddleware`` as
``compress(state)`` callables, the replay of a thread through them, and the prefix-cache figures
of the requests it sent."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain.agents.middleware.summarization import (
    DEFAULT_SUMMARY_PROMPT,
    SummarizationMiddleware,
)
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
)
from langchain_core.messages.utils import get_buffer_string
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from app.compression.summary import ContextCompressor
from app.compression.tokens import TokenCounter, get_encoding
from app.compression.workdir import Workdir
from benchmarks.compression_threads import Turn

THRESHOLD = 12_000
PREVIEW_TOKENS = 800
KEEP_RECENT = 3_000
SUMMARY_MAX = 1_200
#: Price of a cached prompt token relative to an uncached one.
CACHED_PRICE = 0.10
SYSTEM = SystemMessage(
    content="You are Threadkeeper's assistant. Use query_kb and cite result ids. "
    "Offloaded tool results can be read back with read_workdir_file."
)


@tool
def query_kb(query: str, top_k: int = 20) -> str:
    """Search the knowledge base and return scored chunks with ids, sources and URLs."""
    return query


@tool
def run_shell(command: str) -> str:
    """Run a diagnostic shell command and return its output."""
    return command


TOOLS = [query_kb, run_shell]


# --- the shared, counted, deterministic summarizer ----------------------------------------------
class ExtractiveSummaryModel(BaseChatModel):
    """Deterministic 'LLM': keeps the first words of each transcript line, capped in tokens."""

    calls: int = 0
    max_tokens: int = SUMMARY_MAX

    @property
    def _llm_type(self) -> str:
        return "benchmark-extractive"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls += 1
        prompt = messages[-1].text
        transcript = prompt.split("Messages to summarize:", 1)[-1]
        lines = [
            " ".join(line.split()[:14])
            for line in transcript.splitlines()
            if line.startswith(("Human:", "AI:", "Tool:", "Previous summary:"))
        ]
        text = "## SUMMARY\n" + "\n".join(f"- {line}" for line in lines)
        tokens = get_encoding().encode_ordinary(text)[: self.max_tokens]
        return ChatResult(
            generations=[ChatGeneration(message=AIMessage(get_encoding().decode(tokens)))]
        )


class ChatModelSummarizer:
    """Threadkeeper ``Summarizer`` backed by the same chat model and prompt as langchain's."""

    def __init__(self, model: BaseChatModel) -> None:
        self.model = model

    async def asummarize(
        self,
        messages: Sequence[BaseMessage],
        *,
        previous_summary: str | None,
        max_tokens: int,
    ) -> str:
        transcript = get_buffer_string(list(messages))
        if previous_summary:
            transcript = f"Previous summary: {previous_summary}\n{transcript}"
        prompt = DEFAULT_SUMMARY_PROMPT.format(messages=transcript)
        reply = await self.model.ainvoke([HumanMessage(prompt)])
        return reply.text


# --- the two methods in an agent loop -----------------------------------------------------------
Compress = Callable[[list[BaseMessage]], Any]


async def replay(
    turns: Sequence[Turn], compress: Compress, counter: TokenCounter
) -> list[list[BaseMessage]]:
    """Agent loop: before each model call the state may be compressed (and persisted).

    Returns every request's message list as sent (system prompt and tools are the same each time).
    """
    state: list[BaseMessage] = []
    sent: list[list[BaseMessage]] = []
    for human, call, result, answer in turns:
        state.append(human)
        state = await compress(state)  # model call 1 -> emits the tool call
        sent.append(list(state))
        state += [call, result]
        state = await compress(state)  # model call 2 -> emits the answer
        sent.append(list(state))
        state.append(answer)
    sent.append(list(await compress([*state, HumanMessage("And now?", id="final")])))
    return sent


def _wire(message: BaseMessage) -> tuple[Any, ...]:
    """What the provider sees of a message (ids and metadata are not sent)."""
    calls = getattr(message, "tool_calls", None) or []
    return (
        message.type,
        message.text,
        getattr(message, "tool_call_id", None),
        json.dumps([(c["id"], c["name"], c["args"]) for c in calls], sort_keys=True),
    )


def cache_figures(
    requests: Sequence[Sequence[BaseMessage]], counter: TokenCounter
) -> dict[str, Any]:
    """Prefix-cache view of a sequence of requests.

    A request is a *rewrite* when the previous request's messages are not an unchanged prefix of
    it. Its cached tokens are system prompt + tools + the longest unchanged message prefix
    shared with the previous request (what a provider's prompt cache can reuse); effective cost
    bills cached tokens at ``CACHED_PRICE`` of the normal input price.
    """
    base = counter.count_request(SYSTEM, TOOLS, [])
    rewrites = 0
    total = cached = 0
    previous: list[tuple[Any, ...]] | None = None
    for request in requests:
        wire = [_wire(m) for m in request]
        size = base + counter.count_messages(request)
        reuse = 0
        if previous is not None:
            common = 0
            for a, b in zip(previous, wire, strict=False):
                if a != b:
                    break
                common += 1
            if common < len(previous):
                rewrites += 1
            reuse = base + counter.count_messages(request[:common])
        total += size
        cached += reuse
        previous = wire
    return {
        "requests": len(requests),
        "rewrites_per_100": 100 * rewrites / len(requests),
        "prefix_reuse": cached / total,
        "cost": (total - cached) + CACHED_PRICE * cached,
        "cost_nocache": total,
    }


def threadkeeper_method(root: Path, model: ExtractiveSummaryModel, counter: TokenCounter) -> Any:
    compressor = ContextCompressor(
        summarizer=ChatModelSummarizer(model),
        workdir=Workdir(root),
        counter=counter,
        summary_threshold=THRESHOLD,
        tool_result_preview_tokens=PREVIEW_TOKENS,
        summary_keep_recent_tokens=KEEP_RECENT,
        summary_max_tokens=SUMMARY_MAX,
    )

    async def compress(state: list[BaseMessage]) -> list[BaseMessage]:
        outcome = await compressor.compress(
            state, thread_id="bench", system_message=SYSTEM, tools=TOOLS, force=False
        )
        return list(outcome.messages)

    return compress, compressor


def langchain_method(model: ExtractiveSummaryModel, counter: TokenCounter) -> Any:
    base = counter.count_request(SYSTEM, TOOLS, [])
    middleware = SummarizationMiddleware(
        model=model,
        trigger=("tokens", THRESHOLD - base),  # same request-size trigger as ours
        keep=("tokens", KEEP_RECENT),
        token_counter=counter.count_messages,
    )

    async def compress(state: list[BaseMessage]) -> list[BaseMessage]:
        update = await middleware.abefore_model({"messages": state}, None)  # type: ignore[arg-type]
        if not update:
            return state
        messages = update["messages"]
        assert isinstance(messages[0], RemoveMessage) and messages[0].id == REMOVE_ALL_MESSAGES
        return list(messages[1:])

    return compress, middleware
