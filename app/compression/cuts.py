"""Where a model view may be cut: the pure, positional rules of the compression algorithm.

- ``new_input_start``: what the model has not been sent yet (changing only that keeps the
  previous request an unchanged, cached prefix);
- ``plan_summary``: what gets summarized and what stays verbatim: the current user turn always
  stays, and an AI tool call is never separated from its tool results;
- ``plan_segment``: whether the new summary becomes a segment after the summary the view
  starts with (kept as a cached prefix) or everything is folded into one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from app.compression.summary_messages import (
    is_offloaded,
    is_summary_message,
    stacked_summary_text,
    summary_head,
    summary_text_of,
)
from app.compression.tokens import TokenCounter


def is_compacted(sent: Sequence[BaseMessage], fresh: Sequence[BaseMessage]) -> bool:
    """The thread already crossed the threshold (its sent view holds a summary or previews)
    and new tool results arrived."""
    return any(isinstance(m, ToolMessage) for m in fresh) and any(
        is_offloaded(m) or is_summary_message(m) for m in sent
    )


def new_input_start(messages: Sequence[BaseMessage]) -> int:
    """Index of the first message the model has not been sent yet: everything after its last
    reply. Changing only these keeps the previous request an unchanged (cached) prefix."""
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], AIMessage):
            return index + 1
    return 0


def _unsafe_cuts(messages: Sequence[BaseMessage]) -> list[bool]:
    """unsafe[i]: cutting before messages[i] would orphan a ToolMessage from its AI call."""
    n = len(messages)
    unsafe = [False] * (n + 1)
    position: dict[str, int] = {}
    for index, message in enumerate(messages):
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call.get("id"):
                    position[str(call["id"])] = index
        elif isinstance(message, ToolMessage):
            unsafe[index] = True  # a kept view must never start with a tool result
            start = position.get(message.tool_call_id)
            if start is not None:
                for j in range(start + 1, index + 1):
                    unsafe[j] = True
    return unsafe


def current_turn_start(messages: Sequence[BaseMessage]) -> int:
    """Index of the last real user message: it and everything after it is the current turn."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, HumanMessage) and not is_summary_message(message):
            return index
    return len(messages)


def plan_summary(
    messages: Sequence[BaseMessage], *, counter: TokenCounter, keep_recent_tokens: int
) -> int:
    """Cut index: ``messages[:cut]`` get summarized, ``messages[cut:]`` are kept verbatim.

    The current user turn is always kept (even when it alone is oversized); older messages are
    kept only while the kept tail (current turn included) stays within ``keep_recent_tokens``;
    the cut never separates an AIMessage with tool_calls from its ToolMessages. The leading
    summary segments are never cut (they stay, or get folded into the new summary).
    A result ``<= head`` (the number of leading summary segments) means nothing to summarize.
    """
    n = len(messages)
    head = summary_head(messages)
    unsafe = _unsafe_cuts(messages)
    turn = current_turn_start(messages)
    if turn >= n:  # no user message: keep at least the last complete group
        turn = n - 1 if n else 0
    while turn > head and unsafe[turn]:
        turn -= 1
    if turn <= head:
        return head
    cut = turn
    kept = counter.count_messages(messages[turn:])
    for index in range(turn - 1, head - 1, -1):
        kept += counter.count_message(messages[index])
        if kept > keep_recent_tokens:
            break
        if not unsafe[index]:
            cut = index
    return max(cut, head)


#: Cache-aware summaries: a later summarization adds a segment of at most
#: ``summary_max_tokens // SUMMARY_SEGMENTS`` after the summary the view starts with (which stays
#: an unchanged, cached prefix). A first summary, or a fold of all segments into one (same
#: single summarizer call) when the next segment would not fit, gets what leaves room for
#: ``RESERVED_SEGMENTS`` segments; the segments together never exceed ``summary_max_tokens``
#: (text), nor ``SUMMARY_SEGMENTS`` messages.
SUMMARY_SEGMENTS = 6
RESERVED_SEGMENTS = 2


@dataclass(frozen=True, slots=True)
class SegmentPlan:
    """How the new summary joins the summary the view starts with (``stack``)."""

    #: True: a new segment after the kept stack; False: everything folded into one summary.
    stacking: bool
    #: Token cap of the summarizer's text.
    max_tokens: int
    #: The previous summary text to fold in (None when stacking or when there is none).
    previous: str | None
    #: The leading summary segments kept as they are (an unchanged, cached prefix).
    kept: list[BaseMessage]


def plan_segment(
    stack: Sequence[BaseMessage], *, counter: TokenCounter, summary_max_tokens: int
) -> SegmentPlan:
    """Cache-aware: the new segment goes after the existing ones, which stay an unchanged
    prefix; with no room left for it, everything is folded into one summary."""
    segment = max(summary_max_tokens // SUMMARY_SEGMENTS, 1)
    stack_tokens = sum(counter.count_text(summary_text_of(m)) for m in stack)
    # At most SUMMARY_SEGMENTS segments: their headers count too (``summary_reserve``).
    stacking = (
        bool(stack)
        and len(stack) < SUMMARY_SEGMENTS
        and stack_tokens + segment <= summary_max_tokens
    )
    if stacking:
        return SegmentPlan(True, segment, None, list(stack))
    folded_max = max(summary_max_tokens - RESERVED_SEGMENTS * segment, segment)
    return SegmentPlan(False, folded_max, stacked_summary_text(stack), [])
