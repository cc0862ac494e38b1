"""Real summarizer doubles (no mocks): each speaks the ``asummarize`` protocol of app summarizers."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from langchain_core.messages import BaseMessage

from app.offline.summarizer import ExtractiveSummarizer


class CountingSummarizer:
    """Deterministic: counts its calls and records its inputs. ``terse``: a one-line summary
    (``summary of N messages``) whose size does not depend on the messages."""

    def __init__(self, *, terse: bool = False) -> None:
        self.terse = terse
        self.calls = 0
        self.inputs: list[list[BaseMessage]] = []
        self.previous: list[str | None] = []

    async def asummarize(
        self,
        messages: Sequence[BaseMessage],
        *,
        previous_summary: str | None,
        max_tokens: int,
    ) -> str:
        self.calls += 1
        self.inputs.append(list(messages))
        self.previous.append(previous_summary)
        if self.terse:
            return f"summary of {len(messages)} messages"
        lines = [f"summary #{self.calls} of {len(messages)} messages"]
        if previous_summary:
            lines.append(f"earlier: {previous_summary[:200]}")
        for message in messages:
            lines.append(f"- {message.type}: {message.text[:60]}")
        return "\n".join(lines)


class FixedSummarizer:
    """Always answers ``text``."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def asummarize(
        self, messages: Sequence[BaseMessage], *, previous_summary: str | None, max_tokens: int
    ) -> str:
        return self.text


class FailingSummarizer(CountingSummarizer):
    """Its backend fails with an error text that must never reach a client or a message."""

    SECRET = "SECRET-TOKEN-123"

    async def asummarize(
        self,
        messages: Sequence[BaseMessage],
        *,
        previous_summary: str | None,
        max_tokens: int,
    ) -> str:
        self.calls += 1
        raise RuntimeError(f"upstream exploded: {self.SECRET}")


class EmptySummarizer(CountingSummarizer):
    """Answers only whitespace."""

    async def asummarize(
        self,
        messages: Sequence[BaseMessage],
        *,
        previous_summary: str | None,
        max_tokens: int,
    ) -> str:
        self.calls += 1
        return "   "


class BlockingSummarizer:
    """The extractive summarizer, once the test releases it (to prove lock exclusion)."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.calls = 0
        self.inner = ExtractiveSummarizer()

    async def asummarize(
        self, messages: Sequence[BaseMessage], *, previous_summary: str | None, max_tokens: int
    ) -> str:
        self.calls += 1
        self.entered.set()
        await self.release.wait()
        return await self.inner.asummarize(
            messages, previous_summary=previous_summary, max_tokens=max_tokens
        )


class StalledSummarizer:
    """A backend that never answers: only the configured timeout ends a call."""

    def __init__(self) -> None:
        self.calls = 0
        self.cancelled = 0

    async def asummarize(
        self, messages: Sequence[BaseMessage], *, previous_summary: str | None, max_tokens: int
    ) -> str:
        self.calls += 1
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return "never reached"


class SlowChunkedSummarizer:
    """Bounds each of its own calls (like LLMSummarizer); the whole may take longer."""

    bounds_own_time = True

    def __init__(self, *, chunks: int = 3, chunk_seconds: float = 0.2) -> None:
        self.chunks = chunks
        self.chunk_seconds = chunk_seconds
        self.calls = 0

    async def asummarize(
        self, messages: Sequence[BaseMessage], *, previous_summary: str | None, max_tokens: int
    ) -> str:
        for _ in range(self.chunks):  # each "chunk" well within the per-call bound
            await asyncio.sleep(self.chunk_seconds)
        self.calls += 1
        return "summary"
