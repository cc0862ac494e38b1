"""The offline summarizer: deterministic and extractive, no model call.

``ExtractiveSummarizer`` keeps the first sentence of each turn, the tool calls made and every
id/URL cited; it is what an agent gets when no LLM endpoint is configured (``app.agents.models``)
and the offline chat model's (``app.offline.extractive``) summarizing counterpart.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from app.compression.messages import message_text
from app.compression.tokens import count_tokens, truncate_to_tokens
from app.compression.tool_names import QUERY_KB
from app.offline.extracts import KB_CITE, dedupe, first_sentence, preview_ids, short, urls

__all__ = ["ExtractiveSummarizer"]

_REF_KEYS = ("id", "doc_id", "chunk_id", "file_id")
_REFS_PREFIX = "References cited: "
#: Header lines (ours or the middleware's) dropped when a previous summary is folded in.
_HEADER_LINE = re.compile(r"^Summary of (?:the )?earlier conversation\b.*:$", re.IGNORECASE)
_REF_TEXT = re.compile(r"\b(?:kb|doc_id|chunk_id|file_id):[^\s,\])]+|https?://[^\s,\"'<>)\]]+")


def _collect_refs(value: Any, tool: str, out: list[str]) -> None:
    """Ids and URLs found anywhere in a parsed tool result, in document order."""
    if isinstance(value, dict):
        metadata = value.get("metadata")
        for key in _REF_KEYS:
            ident = value.get(key)
            if ident is None and isinstance(metadata, dict):
                ident = metadata.get(key)
            if isinstance(ident, (str, int)) and str(ident):
                prefix = "kb" if (tool == QUERY_KB and key == "id") else key
                out.append(f"{prefix}:{ident}")
        for child in value.values():
            _collect_refs(child, tool, out)
    elif isinstance(value, list):
        for child in value:
            _collect_refs(child, tool, out)
    elif isinstance(value, str):
        out.extend(urls(value))


def _tool_result_refs(message: ToolMessage, tool: str) -> list[str]:
    content = message_text(message)
    refs: list[str] = []
    try:
        _collect_refs(json.loads(content), tool, refs)
    except (TypeError, ValueError):
        refs.extend(f"kb:{i}" for i in preview_ids(content) if tool == QUERY_KB)
        refs.extend(urls(content))
    return refs


class ExtractiveSummarizer:
    """Deterministic summary: first sentences of turns, tool calls made, ids/URLs cited.

    Bounded by ``max_tokens``: the (bounded) previous summary and the references come first,
    then the first user turn (the goal) and as many of the most recent lines as fit; older
    lines are dropped with a marker. References of a previous summary are carried over.
    """

    #: First line of the summary; empty by default because the summary middleware wraps the text
    #: in its own header.
    header: str = ""
    #: Share of ``max_tokens`` a folded-in previous summary may use.
    previous_share: float = 0.4

    async def asummarize(
        self,
        messages: Sequence[BaseMessage],
        *,
        previous_summary: str | None,
        max_tokens: int,
    ) -> str:
        return self.summarize(messages, previous_summary=previous_summary, max_tokens=max_tokens)

    def summarize(
        self,
        messages: Sequence[BaseMessage],
        *,
        previous_summary: str | None,
        max_tokens: int,
    ) -> str:
        lines, refs = self._lines(messages)
        head = [self.header] if self.header else []
        if previous_summary and previous_summary.strip():
            # Old references survive even when the folded text itself gets cut.
            carried = [r.rstrip(".,;:!?") for r in _REF_TEXT.findall(previous_summary)]
            refs = dedupe([*carried, *refs])
            kept_lines = [
                line
                for line in previous_summary.splitlines()
                if not _HEADER_LINE.match(line.strip()) and not line.startswith(_REFS_PREFIX)
            ]
            folded = " ".join(" ".join(kept_lines).split())
            if folded:
                budget = max(1, int(max_tokens * self.previous_share))
                head.append("Earlier: " + truncate_to_tokens(folded, budget))
        if refs:
            head.append(_REFS_PREFIX + ", ".join(refs))
        return self._fit(head, lines, max_tokens)

    @staticmethod
    def _lines(messages: Sequence[BaseMessage]) -> tuple[list[str], list[str]]:
        lines: list[str] = []
        refs: list[str] = []
        call_names: dict[str, str] = {}
        for message in messages:
            text = message_text(message)
            if isinstance(message, HumanMessage):
                sentence = first_sentence(text)
                if sentence:
                    lines.append(f"- User: {sentence}")
            elif isinstance(message, AIMessage):
                sentence = first_sentence(text)
                if sentence:
                    lines.append(f"- Assistant: {sentence}")
                refs.extend(f"kb:{i}" for i in KB_CITE.findall(text))
                refs.extend(urls(text))
                for call in message.tool_calls:
                    if call.get("id"):
                        call_names[str(call["id"])] = call["name"]
                    args = ", ".join(f"{k}={short(v)}" for k, v in list(call["args"].items())[:4])
                    lines.append(f"- Tool call: {call['name']}({args})")
            elif isinstance(message, ToolMessage):
                tool = message.name or call_names.get(message.tool_call_id, "")
                refs.extend(_tool_result_refs(message, tool))
            elif isinstance(message, SystemMessage):
                continue
        return lines, dedupe(refs)

    @staticmethod
    def _fit(head: list[str], lines: list[str], max_tokens: int) -> str:
        def render(body: list[str]) -> str:
            return "\n".join([*head, *body])

        text = render(lines)
        if count_tokens(text) <= max_tokens:
            return text
        # Keep the first user line (the goal) and the most recent lines that fit.
        first, rest = (lines[:1], lines[1:]) if lines else ([], [])
        kept: list[str] = []
        for line in reversed(rest):
            dropped = len(rest) - len(kept) - 1
            candidate = [*first, f"- ({dropped} earlier lines omitted)", line, *kept]
            if count_tokens(render(candidate)) > max_tokens:
                break
            kept.insert(0, line)
        omitted = len(rest) - len(kept)
        body = [*first, *([f"- ({omitted} earlier lines omitted)"] if omitted else []), *kept]
        return truncate_to_tokens(render(body), max_tokens)
