"""The summarizer contract, the LLM summarizer, and the one way the compression core calls one.

A summarizer writes the summary text of some messages, folding in the previous summary:
``LLMSummarizer`` (a chat model, the transcript sent in chunks that fit the thread's own budget)
or the offline ``ExtractiveSummarizer`` (``app.offline.summarizer``: deterministic, no model).
Which one an agent gets is agent assembly's choice (``app.agents.models``). ``call_summarizer``
is how the compression core calls either: traced, bounded in time, counted, and a failure or an
empty text is an error, never a summary.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.constants import TAG_NOSTREAM

from app import metrics, telemetry
from app.compression.messages import message_text
from app.compression.storable import storable_text
from app.compression.tokens import count_tokens, get_encoding, truncate_to_tokens
from app.config import CompressionSettings

if TYPE_CHECKING:
    from app.compression.outcome import CompressionOutcome

__all__ = [
    "LLMSummarizer",
    "Summarizer",
    "SummarizerError",
    "SummaryError",
    "call_summarizer",
    "llm_summarizer",
    "render_transcript",
]


@runtime_checkable
class Summarizer(Protocol):
    """Writes the summary text of ``messages``, folding in the previous summary if any."""

    async def asummarize(
        self,
        messages: Sequence[BaseMessage],
        *,
        previous_summary: str | None,
        max_tokens: int,
    ) -> str: ...


def llm_summarizer(model: BaseChatModel, compression: CompressionSettings) -> LLMSummarizer:
    """An ``LLMSummarizer`` on ``model`` within the budget ``compression``."""
    return LLMSummarizer(
        model,
        timeout_seconds=compression.summary_timeout_seconds,
        # Room for the instructions, the running summary and the answer within the threshold.
        input_budget_tokens=max(
            512, compression.summary_threshold - 2 * compression.summary_max_tokens - 500
        ),
    )


class SummaryError(Exception):
    """The summarizer failed, timed out or returned nothing; no summary must be stored.

    ``fallback`` is the offload-only outcome computed before the summarizer was called, so the
    automatic path can still send the smaller view.
    """

    def __init__(self, message: str, *, fallback: CompressionOutcome | None = None) -> None:
        super().__init__(message)
        self.fallback = fallback


def _clip_tokens(text: str, max_tokens: int) -> str:
    """Hard cap on the summary size so a verbose summarizer cannot defeat the budget."""
    if count_tokens(text) <= max_tokens:
        return text
    marker = "\n[summary truncated]"
    # The marker counts against the cap too (the cap bounds the stacked segments' total).
    room = max(max_tokens - count_tokens(marker) - 1, 1)
    return truncate_to_tokens(text, room).rstrip() + marker


async def call_summarizer(
    summarizer: Summarizer,
    messages: Sequence[BaseMessage],
    *,
    previous: str | None,
    max_tokens: int,
    timeout_seconds: float | None,
    fallback: CompressionOutcome,
) -> str:
    """The summary text, clipped to ``max_tokens``; ``SummaryError`` (carrying ``fallback``)
    when the summarizer fails, times out or returns nothing: never stored as a summary."""
    try:
        with telemetry.tracer().start_as_current_span(
            "summarizer.call", attributes={"threadkeeper.messages": len(messages)}
        ):
            call = summarizer.asummarize(messages, previous_summary=previous, max_tokens=max_tokens)
            # A summarizer that bounds each of its own model calls (one per transcript
            # chunk) must not be cut off as a whole: long histories take several calls.
            bounded = getattr(summarizer, "bounds_own_time", False)
            if timeout_seconds and not bounded:
                text = await asyncio.wait_for(call, timeout=timeout_seconds)
            else:
                text = await call
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        metrics.SUMMARIZER_CALLS.labels("error").inc()
        raise SummaryError(f"summarizer failed: {type(exc).__name__}", fallback=fallback) from exc
    if not isinstance(text, str) or not text.strip():
        metrics.SUMMARIZER_CALLS.labels("error").inc()
        raise SummaryError("summarizer returned an empty summary", fallback=fallback)
    metrics.SUMMARIZER_CALLS.labels("ok").inc()
    return _clip_tokens(text.strip(), max_tokens)


# --- a chat model ------------------------------------------------------------------------------
class SummarizerError(RuntimeError):
    """The summarizer produced no usable summary; callers must not store anything."""


SUMMARY_SYSTEM_PROMPT = """\
You compress the earlier part of a conversation between a user and an AI assistant so the \
assistant can continue the conversation without the original messages.

Write a concise, factual summary in the language of the conversation. Keep:
- the user's goals, requirements and constraints, and what the user asked for;
- facts learned, including from tool results, with their numbers, names and dates;
- decisions made and answers already given;
- every identifier and reference cited: knowledge-base result ids (write them as [kb:<id>]), \
document ids, file names, tool call names with their key arguments, and URLs, verbatim;
- open tasks, unanswered questions and what the assistant was about to do next.

Do not invent anything, do not add advice, do not address the user. If a previous summary is \
given, merge it with the new messages into one summary (newer information wins). Output only the \
summary text, at most {max_tokens} tokens."""


def render_transcript(messages: Sequence[BaseMessage]) -> str:
    """Plain-text transcript for the summarizer: roles, tool calls and tool results by name."""
    return "\n\n".join(transcript_lines(messages))


def clip_line(line: str, max_tokens: int) -> str:
    """Keep a bounded head and tail of one transcript entry, saying how much was cut."""
    total = count_tokens(line)
    if total <= max_tokens:
        return line
    half = max(1, max_tokens // 2)
    head = truncate_to_tokens(line, half)
    tail_tokens = get_encoding().encode_ordinary(line)[-half:]
    tail = get_encoding().decode(tail_tokens).lstrip("\ufffd")
    return f"{head} [... {total - 2 * half} tokens omitted ...] {tail}"


def transcript_chunks(messages: Sequence[BaseMessage], budget_tokens: int) -> list[str]:
    """Transcript split so each chunk fits ``budget_tokens``; an entry larger than half the
    budget is clipped (head and tail kept), so no single message can make summarizing
    impossible for a model whose window is about the budget."""
    per_line = max(64, budget_tokens // 2)
    chunks: list[str] = []
    current: list[str] = []
    used = 0
    for line in transcript_lines(messages):
        line = clip_line(line, per_line)
        size = count_tokens(line) + 2
        if current and used + size > budget_tokens:
            chunks.append("\n\n".join(current))
            current, used = [], 0
        current.append(line)
        used += size
    if current:
        chunks.append("\n\n".join(current))
    return chunks


def transcript_lines(messages: Sequence[BaseMessage]) -> list[str]:
    lines: list[str] = []
    for message in messages:
        text = message_text(message)
        if isinstance(message, HumanMessage):
            lines.append(f"User: {text}")
        elif isinstance(message, AIMessage):
            if text:
                lines.append(f"Assistant: {text}")
            for call in message.tool_calls:
                lines.append(f"Assistant called tool {call['name']} with {call['args']}")
        elif isinstance(message, ToolMessage):
            name = message.name or "tool"
            lines.append(f"Tool result ({name}, call {message.tool_call_id}): {text}")
        elif isinstance(message, SystemMessage):
            lines.append(f"System note: {text}")
        else:
            lines.append(f"{message.type}: {text}")
    return lines


class LLMSummarizer:
    """Summarizes with a chat model; empty output is an error, never a summary.

    The transcript is sent in chunks of at most ``input_budget_tokens`` (the thread's own
    threshold by default), each folded into the running summary, so the summarizer never needs
    a larger window than the agent itself.
    """

    #: Each chunk's model call is bounded by ``timeout_seconds``; see ContextCompressor.compress.
    bounds_own_time = True

    def __init__(
        self,
        chat_model: BaseChatModel,
        *,
        timeout_seconds: float | None = 60.0,
        input_budget_tokens: int = 12_000,
    ) -> None:
        self.chat_model = chat_model
        self.timeout_seconds = timeout_seconds
        self.input_budget_tokens = input_budget_tokens

    @staticmethod
    def _prompt(
        transcript: str, previous_summary: str | None, max_tokens: int
    ) -> list[BaseMessage]:
        parts: list[str] = []
        if previous_summary and previous_summary.strip():
            parts.append(f"<previous_summary>\n{previous_summary.strip()}\n</previous_summary>")
        parts.append(f"<messages>\n{transcript}\n</messages>")
        parts.append("Write the summary now.")
        return [
            SystemMessage(content=SUMMARY_SYSTEM_PROMPT.format(max_tokens=max_tokens)),
            HumanMessage(content="\n\n".join(parts)),
        ]

    async def asummarize(
        self,
        messages: Sequence[BaseMessage],
        *,
        previous_summary: str | None,
        max_tokens: int,
    ) -> str:
        summary = previous_summary
        for chunk in transcript_chunks(messages, self.input_budget_tokens):
            summary = await self._summarize_chunk(chunk, summary, max_tokens)
        if summary is None or not summary.strip():
            raise SummarizerError("nothing to summarize")
        return summary

    async def _summarize_chunk(
        self, transcript: str, previous_summary: str | None, max_tokens: int
    ) -> str:
        prompt = self._prompt(transcript, previous_summary, max_tokens)
        kwargs: dict[str, Any] = {}
        if _is_openai(self.chat_model):
            kwargs["max_tokens"] = max_tokens
        # nostream: the summarizer's tokens are not the agent's answer; keep them off the SSE feed.
        call = self.chat_model.ainvoke(prompt, config={"tags": [TAG_NOSTREAM]}, **kwargs)
        result = (
            await asyncio.wait_for(call, self.timeout_seconds)
            if self.timeout_seconds
            else await call
        )
        # Provider text: the summary goes into the checkpoint and the compression events.
        text = storable_text(message_text(result)).strip()
        if not text:
            raise SummarizerError("the summarizer model returned an empty summary")
        # Providers may ignore max_tokens (or count differently); the bound is ours to keep.
        if count_tokens(text) > max_tokens:
            text = truncate_to_tokens(text, max_tokens).rstrip()
        return text


def _is_openai(model: BaseChatModel) -> bool:
    try:
        from langchain_openai.chat_models.base import BaseChatOpenAI
    except ImportError:  # pragma: no cover - langchain-openai is a dependency
        return False
    return isinstance(model, BaseChatOpenAI)
