"""Budgets that cannot thrash: whether an agent's compression budget leaves room for a turn.

After a summary, the request is at most: system prompt + tool schemas + the summary (its text is
clipped to ``summary_max_tokens``; at most ``SUMMARY_SEGMENTS`` segments, each with its header,
and one pointer to the offload index) + the recent history kept verbatim
(``summary_keep_recent_tokens``). If that plus one more turn does not fit under the threshold,
every model call summarizes again and still ends above it (the reported thrash: threshold 3000
with the default keep-recent 3000). ``budget_misfit`` is the pure rule; ``agent_budget_misfit``
measures an assembled agent's system prompt and tool schemas and applies it. The compressor uses
``summary_reserve`` and ``turn_room`` at run time too (its kept part never outgrows the room left).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from langchain_core.messages import SystemMessage

from app.compression.cuts import SUMMARY_SEGMENTS
from app.compression.summary_messages import build_summary_message, index_note
from app.compression.tokens import TokenCounter
from app.config import CompressionSettings

#: A turn, besides one tool result below the offload size: the user's message and the model's
#: tool call (a short question; longer turns are what "turn alone exceeds" reports).
TURN_MESSAGE_TOKENS = 256
#: The largest offload index count written into a summary's pointer (its digits are counted).
_INDEX_COUNT = 10**9


@dataclass(frozen=True, slots=True)
class Budget:
    """One agent's compression budget (tokens): the compression settings group's four numbers."""

    threshold: int
    preview_tokens: int
    keep_recent_tokens: int
    summary_max_tokens: int

    @classmethod
    def of(cls, settings: CompressionSettings) -> Budget:
        return cls(
            threshold=settings.summary_threshold,
            preview_tokens=settings.tool_result_preview_tokens,
            keep_recent_tokens=settings.summary_keep_recent_tokens,
            summary_max_tokens=settings.summary_max_tokens,
        )


@cache
def summary_framing_tokens() -> int:
    """Tokens the summary messages add around their text: every segment's header and message
    overhead, and one pointer to the offload index (with the largest count it may name)."""
    counter = TokenCounter()
    one = counter.count_message(build_summary_message("", 0))
    return SUMMARY_SEGMENTS * one + counter.count_text("\n\n" + index_note(_INDEX_COUNT))


def summary_reserve(summary_max_tokens: int) -> int:
    """Most tokens the summary takes in a model view."""
    return summary_max_tokens + summary_framing_tokens()


def turn_room(budget: Budget) -> int:
    """What one more turn needs under the threshold: a tool result just below the offload size
    (larger ones become previews of that size) plus the user's message and the tool call."""
    return budget.preview_tokens + TURN_MESSAGE_TOKENS


def budget_misfit(
    budget: Budget, *, system_prompt_tokens: int, tool_schema_tokens: int, agent: str = "default"
) -> str | None:
    """None when keep-recent + summary + system prompt + tool schemas + a turn fit under the
    threshold; else one line naming every number (what ``python -m app`` prints on exit 2)."""
    framing = summary_framing_tokens()
    room = turn_room(budget)
    needed = (
        budget.keep_recent_tokens
        + budget.summary_max_tokens
        + framing
        + system_prompt_tokens
        + tool_schema_tokens
        + room
    )
    if needed < budget.threshold:
        return None
    return (
        f"agent {agent!r}: compression budget leaves no room for a turn: keep-recent "
        f"{budget.keep_recent_tokens} + summary {budget.summary_max_tokens} + summary framing "
        f"{framing} + system prompt {system_prompt_tokens} + tool schemas {tool_schema_tokens} "
        f"+ one turn {room} (preview {budget.preview_tokens} + {TURN_MESSAGE_TOKENS}) = {needed} "
        f"tokens, not below the threshold {budget.threshold}; raise the threshold above {needed} "
        "or lower keep-recent / summary size"
    )


def agent_budget_misfit(
    budget: Budget,
    *,
    system_message: SystemMessage | str,
    tools: Sequence[Any],
    counter: TokenCounter | None = None,
    agent: str = "default",
) -> str | None:
    """``budget_misfit`` for an assembled agent: its system prompt and tool schemas measured as
    every request sends them (the request's own framing counted with the system prompt)."""
    counter = counter or TokenCounter()
    return budget_misfit(
        budget,
        system_prompt_tokens=counter.count_request(system_message, None, ()),
        tool_schema_tokens=counter.count_tools(tools),
        agent=agent,
    )
