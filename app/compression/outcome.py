"""What one compression produced, and how it is applied: the graph-state update, the
``compression`` stream event and the metrics. Shared by the middleware and the manual service."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from langchain_core.messages import BaseMessage, RemoveMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from app import metrics
from app.compression.workdir import OffloadRecord

#: The named outcome of a compression that could not get the view below the threshold because
#: the current turn (kept verbatim, always) does not fit by itself: said, never looped on.
TURN_ALONE_EXCEEDS = "turn_alone_exceeds"


@dataclass(slots=True)
class CompressionOutcome:
    """Result of one compression attempt; ``messages`` is the new model view."""

    messages: list[BaseMessage]
    before_tokens: int
    after_tokens: int
    offloaded: list[OffloadRecord] = field(default_factory=list)
    summarized: bool = False
    summary_text: str | None = None
    #: Messages summarized away by this outcome (not counting earlier summaries).
    summarized_messages: int = 0
    #: Copies of messages whose content was replaced (same ids), for in-place state updates.
    replaced: list[BaseMessage] = field(default_factory=list)
    #: Why large tool results could not be offloaded (one entry per failed write); they stayed
    #: verbatim. Reported in the compression event and the summary so operators see it.
    offload_failures: list[str] = field(default_factory=list)
    #: ``TURN_ALONE_EXCEEDS`` when the view is still at or above the threshold after everything
    #: older than the current turn was summarized (the turn alone does not fit); else None.
    over_threshold: str | None = None
    #: The threshold (provider's measure) the view was compressed for, when ``over_threshold``.
    threshold: int | None = None

    @property
    def changed(self) -> bool:
        return self.summarized or bool(self.replaced)


def record_outcome(reason: str, outcome: CompressionOutcome) -> None:
    metrics.record_compression(
        reason=reason,
        summarized=outcome.summarized,
        offloaded=len(outcome.offloaded),
        before_tokens=outcome.before_tokens,
        after_tokens=outcome.after_tokens,
    )


def merge_outcomes(
    first: CompressionOutcome | None, second: CompressionOutcome
) -> CompressionOutcome:
    """Combine the automatic outcome with the overflow retry's outcome (second view wins)."""
    if first is None or not first.changed:
        return second
    final_ids = {id(m) for m in second.messages}
    replaced = [m for m in [*first.replaced, *second.replaced] if id(m) in final_ids]
    return replace(
        second,
        before_tokens=first.before_tokens,
        offloaded=[*first.offloaded, *second.offloaded],
        summarized=first.summarized or second.summarized,
        summary_text=second.summary_text or first.summary_text,
        summarized_messages=first.summarized_messages + second.summarized_messages,
        replaced=replaced,
        offload_failures=[*first.offload_failures, *second.offload_failures],
    )


def state_update(
    outcome: CompressionOutcome, response_messages: Sequence[BaseMessage]
) -> dict[str, Any]:
    """The ``messages`` update persisting the compressed view into the graph state.

    Offload only: the replaced ToolMessages with their original ids (replaced in place).
    Summary: remove everything, then the new view followed by the model's response.
    """
    for message in response_messages:
        if message.id is None:
            message.id = str(uuid.uuid4())
    if not outcome.summarized and all(m.id for m in outcome.replaced):
        return {"messages": list(outcome.replaced)}
    return {
        "messages": [
            RemoveMessage(id=REMOVE_ALL_MESSAGES),
            *outcome.messages,
            *response_messages,
        ]
    }


def compression_event(reason: str, outcome: CompressionOutcome) -> dict[str, Any]:
    """The compression event of an applied automatic compression (also counted in metrics);
    also of one that changed nothing, when offloading failed or the turn alone exceeds."""
    record_outcome(reason, outcome)
    return {
        "type": "compression",
        "reason": reason,
        "before_tokens": outcome.before_tokens,
        "after_tokens": outcome.after_tokens,
        "offloaded": len(outcome.offloaded),
        "summarized": outcome.summarized,
        **(
            {
                "offload_failed": len(outcome.offload_failures),
                "offload_error": f"workdir_unavailable: {outcome.offload_failures[0]}",
            }
            if outcome.offload_failures
            else {}
        ),
        **(
            {"over_threshold": outcome.over_threshold, "threshold": outcome.threshold}
            if outcome.over_threshold
            else {}
        ),
    }
