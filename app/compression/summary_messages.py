"""The summary message: how it is built, recognised and read back.

The compression core writes it; the state endpoint, the worker (which never stores it as a
message of the thread) and the offline model read it. Its text is ``SUMMARY_HEADER`` + the
summarizer's text (+ one pointer to the thread's offload index); its marker
(``additional_kwargs["threadkeeper"]``) carries ``kind: summary`` and the running counts.
A view may start with several summary messages (segments, see ``SUMMARY_SEGMENTS`` in the
summary middleware); together they are "the summary".
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage

from app.compression.messages import MARKER, marker
from app.compression.workdir import INDEX_PATH

SUMMARY_NAME = "context_summary"
SUMMARY_HEADER = "Summary of earlier conversation:"
#: Older summaries listed offloaded files under this header; ``summary_text_of`` strips it.
ARTIFACTS_HEADER = "Offloaded tool results (full text readable with read_workdir_file):"
INDEX_HEADER = "Offloaded tool results:"
#: langchain's own SummarizationMiddleware header, folded in the same way as ours.
_LANGCHAIN_HEADER = "Here is a summary of the conversation to date:"


def is_summary_message(message: BaseMessage) -> bool:
    """Our summary message (or langchain's own summarization output, folded in the same way)."""
    if not isinstance(message, HumanMessage):
        return False
    return (
        marker(message).get("kind") == "summary"
        or message.name == SUMMARY_NAME
        or message.additional_kwargs.get("lc_source") == "summarization"
    )


def is_offloaded(message: BaseMessage) -> bool:
    """A tool result whose original went to the Workdir and whose content is now a preview."""
    return "offloaded" in marker(message)


def summary_head(messages: Sequence[BaseMessage]) -> int:
    """How many summary messages (segments) the view starts with."""
    count = 0
    while count < len(messages) and is_summary_message(messages[count]):
        count += 1
    return count


def summary_text_of(message: BaseMessage) -> str:
    """The summary body without our header line and without the offloaded-files index."""
    text = message.text.strip()
    for header in (SUMMARY_HEADER, _LANGCHAIN_HEADER):
        if text.startswith(header):
            text = text[len(header) :].strip()
            break
    for header in (ARTIFACTS_HEADER, INDEX_HEADER):
        text = text.split(f"\n\n{header}", 1)[0]
    return text.strip()


def stacked_summary_text(messages: Sequence[BaseMessage]) -> str | None:
    """The summary the view starts with: its segments' texts in order, or None."""
    texts = [summary_text_of(m) for m in messages[: summary_head(messages)]]
    return "\n\n".join(t for t in texts if t) or None


def summarized_count(messages: Sequence[BaseMessage]) -> int:
    """Messages summarized so far: the running count the newest leading segment carries."""
    stack = messages[: summary_head(messages)]
    return max((int(marker(m).get("summarized_messages", 0) or 0) for m in stack), default=0)


def index_note(indexed: int) -> str:
    """The summary's pointer to every offloaded original (one line, however many there are)."""
    return (
        f"{INDEX_HEADER} all {indexed} full originals so far (and every later one) are kept in "
        f"this thread's workdir and listed in the file {INDEX_PATH} (one JSON line each: path, "
        "tool, args, result ids, URLs, titles, sha256). Find text in any of them with "
        "search_workdir(query) and read one with read_workdir_file(path, offset, limit)."
    )


def build_summary_message(
    text: str,
    summarized_count: int,
    *,
    previous_summarized: int = 0,
    summary_tokens: int | None = None,
    reason: str = "threshold",
    indexed: int = 0,
    provider_ratio: float = 1.0,
    offload_failures: Sequence[str] = (),
) -> HumanMessage:
    """The message that replaces the summarized history, clearly marked as a summary.

    ``indexed``: offloaded originals in the thread's index; when any, the summary names the
    index file (and ``search_workdir``) so every one of them stays discoverable.
    """
    meta: dict[str, Any] = {
        "kind": "summary",
        "summarized_messages": summarized_count + previous_summarized,
        "summarized_now": summarized_count,
        "created_at": datetime.now(UTC).isoformat(),
        "reason": reason,
    }
    if summary_tokens is not None:
        meta["summary_tokens"] = summary_tokens
    if provider_ratio != 1.0:
        # Carried so the view keeps the provider's measure after its AI messages are gone.
        meta["provider_ratio"] = provider_ratio
    if offload_failures:
        # Large results stayed verbatim because the Workdir write failed: say so, and why.
        meta["offload_failed"] = {"count": len(offload_failures), "reason": offload_failures[0]}
    content = f"{SUMMARY_HEADER}\n{text.strip()}"
    if indexed:
        meta["indexed"] = indexed
        content += "\n\n" + index_note(indexed)
    return HumanMessage(
        content=content,
        name=SUMMARY_NAME,
        id=f"summary-{uuid.uuid4()}",
        additional_kwargs={MARKER: meta},
    )
