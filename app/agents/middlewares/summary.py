"""Summary middleware: keeps every model request under ONE token threshold (DESIGN 3).

Order of operations, cheapest and least lossy first:

1. count the request (system prompt + tool schemas + messages); below the threshold: send as is;
2. deterministic pass: offload large tool results to the Workdir and show a preview instead
   (no model call, nothing lost: the full text stays readable with ``read_workdir_file`` and
   findable through the thread's index and ``search_workdir``). Cache-aware order: results the
   model was never sent go first (the cached prefix stays intact); if a rewrite of the sent part
   is needed, every large result goes in that one step. Once compacted, new large results arrive
   as previews (append-only view);
3. still over: summarize the oldest part with the summarizer, keep the recent part and always
   the current user turn verbatim, never splitting an AI tool call from its tool results. The
   summary the view already starts with is not rewritten: the new part becomes a segment right
   after it (cached prefix kept), until the segments would exceed ``summary_max_tokens`` and
   are folded into one in the same summarizer call;
4. a provider context-overflow error forces step 3 and one retry with a strictly smaller request.

The pieces are small pure functions so each rule is unit-testable; ``ContextCompressor`` chains
them and is shared by the middleware (automatic path) and the service (manual path).
Input messages are never mutated: changed messages are copies (``model_copy``) keeping their ids,
so the add_messages reducer replaces them in the graph state and nothing else is touched (the
full record in the ``messages`` table is not ours to change).
"""

from __future__ import annotations

import asyncio
import errno
import math
import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol, cast, runtime_checkable

import structlog
from langchain.agents.middleware.types import (
    AgentMiddleware,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
)
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.types import Command

from app import metrics, telemetry
from app.agents.messages import MARKER
from app.agents.messages import marker as _meta
from app.agents.overflow import is_context_overflow
from app.agents.previews import RECOVERY_TOOL, SEARCH_TOOL, build_preview
from app.agents.recall import index_fields
from app.agents.tokens import TokenCounter, count_tokens, truncate_to_tokens
from app.agents.workdir import (
    INDEX_PATH,
    OffloadRecord,
    Workdir,
    WorkdirError,
    WorkdirPathError,
)
from app.config import CompressionSettings

log = structlog.get_logger(__name__)

META_KEY = MARKER
SUMMARY_NAME = "context_summary"
SUMMARY_HEADER = "Summary of earlier conversation:"
#: Characters of preview per token of ``tool_result_preview_tokens`` (JSON/ids run ~3 chars/token).
PREVIEW_CHARS_PER_TOKEN = 3
DEFAULT_PROTECTED_TOOLS: frozenset[str] = frozenset({RECOVERY_TOOL, SEARCH_TOOL})
#: Older summaries listed offloaded files under this header; ``summary_text_of`` strips it.
ARTIFACTS_HEADER = "Offloaded tool results (full text readable with read_workdir_file):"
#: Cache-aware summaries: a later summarization adds a segment of at most
#: ``summary_max_tokens // SUMMARY_SEGMENTS`` after the summary the view starts with (which stays
#: an unchanged, cached prefix). A first summary, or a fold of all segments into one (same
#: single summarizer call) when the next segment would not fit, gets what leaves room for
#: ``RESERVED_SEGMENTS`` segments; the segments together never exceed ``summary_max_tokens``.
SUMMARY_SEGMENTS = 6
RESERVED_SEGMENTS = 2
INDEX_HEADER = "Offloaded tool results:"


# --- contracts ----------------------------------------------------------------------------------
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


class SummaryError(Exception):
    """The summarizer failed, timed out or returned nothing; no summary must be stored.

    ``fallback`` is the offload-only outcome computed before the summarizer was called, so the
    automatic path can still send the smaller view.
    """

    def __init__(self, message: str, *, fallback: CompressionOutcome | None = None) -> None:
        super().__init__(message)
        self.fallback = fallback


class NothingToCompress(Exception):
    """Manual compression refused: nothing could be offloaded or summarized (history too short)."""

    def __init__(self, message: str, *, tokens: int) -> None:
        super().__init__(message)
        self.tokens = tokens


class WorkdirUnavailable(Exception):
    """Manual compression refused: large tool results had to be offloaded and the Workdir
    write failed (full disk, read-only mount, blocked path). Nothing was shrunk or written."""

    def __init__(self, message: str, *, reason: str, failed: int) -> None:
        super().__init__(message)
        self.reason = reason
        self.failed = failed


def workdir_failure_reason(exc: BaseException) -> str:
    """Why an offload failed, without paths: ``ENOSPC (No space left on device)``..."""
    cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
    if isinstance(cause, OSError) and cause.errno is not None:
        name = errno.errorcode.get(cause.errno, str(cause.errno))
        return f"{name} ({cause.strerror or 'I/O error'})"
    if isinstance(exc, WorkdirPathError):
        return "unusable workdir path"
    return "workdir root missing or not a directory"


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

    @property
    def changed(self) -> bool:
        return self.summarized or bool(self.replaced)


# --- message helpers ----------------------------------------------------------------------------
def is_summary_message(message: BaseMessage) -> bool:
    """Our summary message (or langchain's own summarization output, folded in the same way)."""
    if not isinstance(message, HumanMessage):
        return False
    return (
        _meta(message).get("kind") == "summary"
        or message.name == SUMMARY_NAME
        or message.additional_kwargs.get("lc_source") == "summarization"
    )


def summary_head(messages: Sequence[BaseMessage]) -> int:
    """How many summary messages (segments) the view starts with."""
    count = 0
    while count < len(messages) and is_summary_message(messages[count]):
        count += 1
    return count


def stacked_summary_text(messages: Sequence[BaseMessage]) -> str | None:
    """The summary the view starts with: its segments' texts in order, or None."""
    texts = [summary_text_of(m) for m in messages[: summary_head(messages)]]
    return "\n\n".join(t for t in texts if t) or None


def summarized_count(messages: Sequence[BaseMessage]) -> int:
    """Messages summarized so far: the running count the newest leading segment carries."""
    stack = messages[: summary_head(messages)]
    return max((int(_meta(m).get("summarized_messages", 0) or 0) for m in stack), default=0)


def is_offloaded(message: BaseMessage) -> bool:
    return "offloaded" in _meta(message)


def summary_text_of(message: BaseMessage) -> str:
    """The summary body without our header line and without the offloaded-files index."""
    text = message.text.strip()
    for header in (SUMMARY_HEADER, "Here is a summary of the conversation to date:"):
        if text.startswith(header):
            text = text[len(header) :].strip()
            break
    for header in (ARTIFACTS_HEADER, INDEX_HEADER):
        text = text.split(f"\n\n{header}", 1)[0]
    return text.strip()


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
        additional_kwargs={META_KEY: meta},
    )


def _calls_by_id(messages: Sequence[BaseMessage]) -> dict[str, tuple[str, dict[str, Any]]]:
    """tool_call_id -> (tool name, args) of the AI tool calls among ``messages``."""
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    for message in messages:
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call.get("id"):
                    calls[str(call["id"])] = (call["name"], dict(call.get("args") or {}))
    return calls


def _plain_text(message: ToolMessage) -> str | None:
    """Text of a tool result, or None if it carries non-text blocks we must not flatten."""
    content = message.content
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") in (None, "text"):
            parts.append(str(block.get("text", "")))
        else:
            return None
    return "".join(parts)


# --- step 2: deterministic pass -----------------------------------------------------------------
async def deterministic_pass(
    messages: Sequence[BaseMessage],
    *,
    thread_id: str,
    workdir: Workdir,
    counter: TokenCounter,
    preview_tokens: int,
    protected_tools: Collection[str] = DEFAULT_PROTECTED_TOOLS,
    stop_below: int | None = None,
    base_tokens: int = 0,
    start: int = 0,
    failures: list[str] | None = None,
) -> tuple[list[BaseMessage], list[OffloadRecord]]:
    """Offload ToolMessages larger than ``preview_tokens`` (oldest first) and show previews.

    Only ``messages[start:]`` are candidates. ``stop_below``: stop as soon as ``base_tokens`` +
    the view is under it (``None`` offloads every candidate). Each original gets its entry in
    the thread's index in the same Workdir call; a failed write or append leaves that message
    unchanged and its reason is appended to ``failures``. Returns copies; inputs are not mutated.
    """
    view = list(messages)
    offloaded: list[OffloadRecord] = []
    calls = _calls_by_id(messages)
    running = base_tokens + counter.count_messages(view) if stop_below is not None else 0
    budget_chars = max(preview_tokens * PREVIEW_CHARS_PER_TOKEN, 600)
    for index in range(start, len(messages)):
        message = messages[index]
        if stop_below is not None and running < stop_below:
            break
        if not isinstance(message, ToolMessage) or is_offloaded(message):
            continue
        tool_name, args = calls.get(message.tool_call_id, ("", {}))
        tool_name = message.name or tool_name
        if tool_name in protected_tools:
            continue
        original_tokens = counter.count_message(message)
        if original_tokens <= preview_tokens:
            continue
        text = _plain_text(message)
        if text is None:
            continue
        record = await _store(workdir, thread_id, message, tool_name, args, text, failures)
        if record is None:
            continue
        preview = build_preview(tool_name, text, record, budget_chars)
        meta = {
            **_meta(message),
            "offloaded": {
                "path": record.path,
                "sha256": record.sha256,
                "chars": record.chars,
                "bytes": record.bytes,
                "original_tokens": original_tokens,
            },
        }
        replacement = message.model_copy(
            update={
                "content": preview,
                "name": message.name or tool_name or None,
                "additional_kwargs": {**message.additional_kwargs, META_KEY: meta},
            },
            deep=False,
        )
        new_tokens = counter.count_message(replacement)
        if new_tokens >= original_tokens:
            continue
        view[index] = replacement
        offloaded.append(record)
        running -= original_tokens - new_tokens
    return view, offloaded


async def _store(
    workdir: Workdir,
    thread_id: str,
    message: ToolMessage,
    tool_name: str,
    args: dict[str, Any],
    text: str,
    failures: list[str] | None = None,
) -> OffloadRecord | None:
    """Write one original and its index entry; None (logged, reason appended to ``failures``)
    when the Workdir refuses."""
    try:
        return await workdir.write_tool_result(
            thread_id,
            message.tool_call_id,
            text,
            index=index_fields(tool_name, args, text),
        )
    except (WorkdirError, WorkdirPathError) as exc:
        log.warning(
            "workdir_offload_failed",
            thread_id=thread_id,
            tool_call_id=message.tool_call_id,
            error=str(exc),
        )
        if failures is not None:
            failures.append(workdir_failure_reason(exc))
        return None


async def keep_originals(
    messages: Sequence[BaseMessage],
    *,
    thread_id: str,
    workdir: Workdir,
    protected_tools: Collection[str] = DEFAULT_PROTECTED_TOOLS,
) -> int:
    """Store (and index) every not yet offloaded tool result about to be summarized away,
    whatever its size, so the summary never loses an original; returns the index size."""
    calls = _calls_by_id(messages)
    for message in messages:
        if not isinstance(message, ToolMessage) or is_offloaded(message):
            continue
        tool_name, args = calls.get(message.tool_call_id, ("", {}))
        tool_name = message.name or tool_name
        text = _plain_text(message)
        if tool_name in protected_tools or text is None:
            continue
        await _store(workdir, thread_id, message, tool_name, args, text)
    try:
        return len(await workdir.read_index(thread_id))
    except (WorkdirError, WorkdirPathError):
        return 0


def _compacted(sent: Sequence[BaseMessage], fresh: Sequence[BaseMessage]) -> bool:
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


# --- step 3: what to summarize ------------------------------------------------------------------
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


def _clip_tokens(text: str, max_tokens: int) -> str:
    """Hard cap on the summary size so a verbose summarizer cannot defeat the budget."""
    if count_tokens(text) <= max_tokens:
        return text
    marker = "\n[summary truncated]"
    # The marker counts against the cap too (the cap bounds the stacked segments' total).
    room = max(max_tokens - count_tokens(marker) - 1, 1)
    return truncate_to_tokens(text, room).rstrip() + marker


# --- provider calibration -----------------------------------------------------------------------
#: Our raw count of the request that produced an AI message, stamped by the middleware.
REQUEST_TOKENS_KEY = "threadkeeper_request_tokens"
#: A provider whose tokenizer differs from cl100k is trusted within these bounds.
MIN_RATIO, MAX_RATIO = 0.5, 2.0


def provider_ratio(messages: Sequence[BaseMessage]) -> float:
    """provider-reported input tokens / our count of that request, from the latest reply.

    Our counts are exact cl100k BPE; a provider with another tokenizer bills (and overflows) by
    its own. The pair is recorded when the request is sent, so later compressions of the view
    cannot skew it.
    """
    latest = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    if latest is not None:
        ours = (latest.response_metadata or {}).get(REQUEST_TOKENS_KEY)
        usage: dict[str, Any] = dict(latest.usage_metadata or {})
        theirs = usage.get("input_tokens")
        if isinstance(ours, int) and ours > 0 and isinstance(theirs, int) and theirs > 0:
            return min(max(theirs / ours, MIN_RATIO), MAX_RATIO)
    if messages and is_summary_message(messages[0]):
        carried = _meta(messages[0]).get("provider_ratio")
        if isinstance(carried, (int, float)) and carried > 0:
            return min(max(float(carried), MIN_RATIO), MAX_RATIO)
    return 1.0


def scale(raw_tokens: int, ratio: float) -> int:
    return raw_tokens if ratio == 1.0 else round(raw_tokens * ratio)


def stamp_request_tokens(response_messages: Sequence[BaseMessage], raw_tokens: int) -> None:
    """Remember our count of the request on its reply (skipped for the offline extractive
    model, whose "usage" is our own count, not a provider's)."""
    for message in response_messages:
        if not isinstance(message, AIMessage) or not message.usage_metadata:
            continue
        if (message.response_metadata or {}).get("model_name") == "extractive":
            continue
        message.response_metadata = {
            **(message.response_metadata or {}),
            REQUEST_TOKENS_KEY: raw_tokens,
        }


# --- the algorithm ------------------------------------------------------------------------------
#: The one home of the compression defaults is the settings group; the keyword defaults below
#: (tests, benchmarks) take theirs from it.
_DEFAULTS = CompressionSettings()


class ContextCompressor:
    """Runs DESIGN 3 on a model view; shared by the middleware and the manual service path."""

    def __init__(
        self,
        *,
        summarizer: Summarizer,
        workdir: Workdir | None,
        counter: TokenCounter | None = None,
        summary_threshold: int = _DEFAULTS.summary_threshold,
        tool_result_preview_tokens: int = _DEFAULTS.tool_result_preview_tokens,
        summary_keep_recent_tokens: int = _DEFAULTS.summary_keep_recent_tokens,
        summary_max_tokens: int = _DEFAULTS.summary_max_tokens,
        summary_timeout_seconds: float | None = _DEFAULTS.summary_timeout_seconds,
        protected_tools: Collection[str] = DEFAULT_PROTECTED_TOOLS,
    ) -> None:
        self.summarizer = summarizer
        self.workdir = workdir
        self.counter = counter or TokenCounter()
        self.summary_threshold = summary_threshold
        self.preview_tokens = tool_result_preview_tokens
        self.keep_recent_tokens = summary_keep_recent_tokens
        self.summary_max_tokens = summary_max_tokens
        self.summary_timeout_seconds = summary_timeout_seconds
        self.protected_tools = frozenset(protected_tools)

    @classmethod
    def from_settings(
        cls,
        settings: CompressionSettings,
        *,
        summarizer: Summarizer,
        workdir: Workdir | None,
        counter: TokenCounter | None = None,
    ) -> ContextCompressor:
        """Build from the compression settings group."""
        return cls(
            summarizer=summarizer,
            workdir=workdir,
            counter=counter,
            summary_threshold=settings.summary_threshold,
            tool_result_preview_tokens=settings.tool_result_preview_tokens,
            summary_keep_recent_tokens=settings.summary_keep_recent_tokens,
            summary_max_tokens=settings.summary_max_tokens,
            summary_timeout_seconds=settings.summary_timeout_seconds,
        )

    async def _offload(
        self,
        messages: Sequence[BaseMessage],
        thread_id: str,
        base: int,
        *,
        stop_below: int | None,
        start: int = 0,
        failures: list[str] | None = None,
    ) -> tuple[list[BaseMessage], list[OffloadRecord]]:
        assert self.workdir is not None
        return await deterministic_pass(
            messages,
            thread_id=thread_id,
            workdir=self.workdir,
            counter=self.counter,
            preview_tokens=self.preview_tokens,
            protected_tools=self.protected_tools,
            stop_below=stop_below,
            base_tokens=base,
            start=start,
            failures=failures,
        )

    def count(
        self,
        messages: Sequence[BaseMessage],
        *,
        system_message: SystemMessage | str | None = None,
        tools: Sequence[Any] | None = None,
    ) -> int:
        """Tokens of the request the model would receive, in the provider's measure when the
        thread's last model reply reported usage (see ``provider_ratio``)."""
        raw = self.counter.count_request(system_message, tools, messages)
        return scale(raw, provider_ratio(messages))

    async def compress(
        self,
        messages: Sequence[BaseMessage],
        *,
        thread_id: str | None,
        system_message: SystemMessage | str | None = None,
        tools: Sequence[Any] | None = None,
        force: bool = False,
        reason: str = "threshold",
        require_offload: bool = False,
    ) -> CompressionOutcome:
        """Apply DESIGN 3. ``force`` skips the threshold gates (manual path, overflow retry).

        Raises ``SummaryError`` if the summarizer fails (caller leaves state untouched),
        with ``force``, ``NothingToCompress`` when nothing could be offloaded or summarized,
        and with ``require_offload`` (manual path), ``WorkdirUnavailable`` as soon as a result
        that had to be offloaded could not be written (before any summarizer call).
        """
        with telemetry.tracer().start_as_current_span(
            "context.compress", attributes={"threadkeeper.reason": reason}
        ) as span:
            outcome = await self._compress(
                messages,
                thread_id=thread_id,
                system_message=system_message,
                tools=tools,
                force=force,
                reason=reason,
                require_offload=require_offload,
            )
            span.set_attributes(
                {
                    "threadkeeper.before_tokens": outcome.before_tokens,
                    "threadkeeper.after_tokens": outcome.after_tokens,
                    "threadkeeper.offloaded": len(outcome.offloaded),
                    "threadkeeper.summarized": outcome.summarized,
                }
            )
            return outcome

    async def _compress(
        self,
        messages: Sequence[BaseMessage],
        *,
        thread_id: str | None,
        system_message: SystemMessage | str | None,
        tools: Sequence[Any] | None,
        force: bool,
        reason: str,
        require_offload: bool,
    ) -> CompressionOutcome:
        ratio = provider_ratio(messages)
        # The threshold is in the provider's measure; compare raw counts against it converted.
        limit = math.ceil(self.summary_threshold / ratio)
        base = self.counter.count_request(system_message, tools, ())
        before = base + self.counter.count_messages(messages)
        view: list[BaseMessage] = list(messages)
        offloaded: list[OffloadRecord] = []
        failures: list[str] = []
        can_offload = self.workdir is not None and bool(thread_id)
        fresh = new_input_start(view)
        if not force and can_offload and _compacted(view[:fresh], view[fresh:]):
            # Append-only once compacted: a large result the model has not been sent yet
            # arrives as a preview. It is the tail, so no cached prefix is lost; kept verbatim
            # it would only force a rewrite of the cached prefix at the next crossing.
            view, offloaded = await self._offload(
                view, str(thread_id), base, stop_below=None, start=fresh, failures=failures
            )
        if not force and base + self.counter.count_messages(view) < limit:
            if not offloaded:
                return CompressionOutcome(
                    view, scale(before, ratio), scale(before, ratio), offload_failures=failures
                )
        elif can_offload:
            if not force:
                # Cache-aware first: results the model was never sent shrink for free (the
                # previous request stays an unchanged prefix of this one).
                view, more = await self._offload(
                    view, str(thread_id), base, stop_below=limit, start=fresh, failures=failures
                )
                offloaded += more
            if force or base + self.counter.count_messages(view) >= limit:
                # Rewriting the cached part is unavoidable now: offload every large result in
                # one step so the next crossing is many turns away, never a trickle per turn.
                view, more = await self._offload(
                    view, str(thread_id), base, stop_below=None, failures=failures
                )
                offloaded += more
        if failures and require_offload:
            raise WorkdirUnavailable(
                f"{len(failures)} tool result(s) had to be offloaded but the workdir could not "
                f"be written ({failures[0]}); nothing was changed",
                reason=failures[0],
                failed=len(failures),
            )
        replaced = [new for new, old in zip(view, messages, strict=True) if new is not old]
        middle = base + self.counter.count_messages(view)
        offload_only = CompressionOutcome(
            view,
            scale(before, ratio),
            scale(middle, ratio),
            offloaded,
            replaced=replaced,
            offload_failures=failures,
        )
        if not force and middle < limit:
            return offload_only

        cut = plan_summary(
            view, counter=self.counter, keep_recent_tokens=int(self.keep_recent_tokens / ratio)
        )
        head = summary_head(view)
        if cut <= head:
            if force and not replaced:
                raise NothingToCompress(
                    "history too short to compress: nothing to offload or summarize",
                    tokens=scale(before, ratio),
                )
            return offload_only

        stack = view[:head]
        previous_count = summarized_count(stack)
        segment = max(self.summary_max_tokens // SUMMARY_SEGMENTS, 1)
        stack_tokens = sum(self.counter.count_text(summary_text_of(m)) for m in stack)
        # Cache-aware: the new segment goes after the existing ones, which stay an unchanged
        # prefix; with no room left for it, everything is folded into one summary.
        stacking = head > 0 and stack_tokens + segment <= self.summary_max_tokens
        segment_max = (
            segment
            if stacking
            else max(self.summary_max_tokens - RESERVED_SEGMENTS * segment, segment)
        )
        previous = None if stacking else stacked_summary_text(stack)
        kept_stack = list(stack) if stacking else []
        to_summarize = view[head:cut]
        indexed = 0
        if self.workdir is not None and thread_id:
            indexed = await keep_originals(
                to_summarize,
                thread_id=thread_id,
                workdir=self.workdir,
                protected_tools=self.protected_tools,
            )
        try:
            with telemetry.tracer().start_as_current_span(
                "summarizer.call", attributes={"threadkeeper.messages": len(to_summarize)}
            ):
                call = self.summarizer.asummarize(
                    to_summarize, previous_summary=previous, max_tokens=segment_max
                )
                # A summarizer that bounds each of its own model calls (one per transcript
                # chunk) must not be cut off as a whole: long histories take several calls.
                bounded = getattr(self.summarizer, "bounds_own_time", False)
                if self.summary_timeout_seconds and not bounded:
                    text = await asyncio.wait_for(call, timeout=self.summary_timeout_seconds)
                else:
                    text = await call
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            metrics.SUMMARIZER_CALLS.labels("error").inc()
            raise SummaryError(
                f"summarizer failed: {type(exc).__name__}", fallback=offload_only
            ) from exc
        if not isinstance(text, str) or not text.strip():
            metrics.SUMMARIZER_CALLS.labels("error").inc()
            raise SummaryError("summarizer returned an empty summary", fallback=offload_only)
        metrics.SUMMARIZER_CALLS.labels("ok").inc()
        text = _clip_tokens(text.strip(), segment_max)
        summary = build_summary_message(
            text,
            len(to_summarize),
            previous_summarized=previous_count,
            summary_tokens=self.counter.count_text(text),
            reason=reason,
            # One pointer to the index is enough: a stacked segment names it only if no
            # earlier one does.
            indexed=0 if any(INDEX_PATH in m.text for m in kept_stack) else indexed,
            provider_ratio=ratio,
            offload_failures=failures,
        )
        new_view = [*kept_stack, summary, *view[cut:]]
        after = base + self.counter.count_messages(new_view)
        kept_ids = {id(m) for m in view[cut:]}
        return CompressionOutcome(
            new_view,
            scale(before, ratio),
            scale(after, ratio),
            offloaded,
            summarized=True,
            summary_text=text,
            summarized_messages=len(to_summarize),
            replaced=[m for m in replaced if id(m) in kept_ids],
            offload_failures=failures,
        )


def record_outcome(reason: str, outcome: CompressionOutcome) -> None:
    metrics.record_compression(
        reason=reason,
        summarized=outcome.summarized,
        offloaded=len(outcome.offloaded),
        before_tokens=outcome.before_tokens,
        after_tokens=outcome.after_tokens,
    )


# --- the middleware -----------------------------------------------------------------------------
def _thread_id() -> str | None:
    try:
        from langgraph.config import get_config

        value = get_config().get("configurable", {}).get("thread_id")
    except Exception:  # outside a graph run
        return None
    return str(value) if value else None


def _emit(event: dict[str, Any]) -> None:
    try:
        from langgraph.config import get_stream_writer

        get_stream_writer()(event)
    except Exception:  # no runnable context or no custom stream: the event is optional
        log.debug("compression_event_not_streamed")


def _merge(first: CompressionOutcome | None, second: CompressionOutcome) -> CompressionOutcome:
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


class SummaryMiddleware(AgentMiddleware):
    """Keeps each model call under the threshold and persists the compressed view."""

    def __init__(self, compressor: ContextCompressor) -> None:
        super().__init__()
        self.compressor = compressor

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse | ExtendedModelResponse:
        thread_id = _thread_id()
        compressor = self.compressor
        outcome: CompressionOutcome | None = None
        try:
            outcome = await compressor.compress(
                request.messages,
                thread_id=thread_id,
                system_message=request.system_message,
                tools=request.tools,
                force=False,
            )
        except SummaryError as exc:
            log.warning(
                "summary_failed",
                thread_id=thread_id,
                error=str(exc),
                cause=repr(exc.__cause__),
            )
            outcome = exc.fallback
        current = request
        if outcome is not None and outcome.changed:
            current = request.override(messages=_as_any(outcome.messages))
        if outcome is not None and (outcome.changed or outcome.offload_failures):
            # Also when nothing changed because offloading failed: the operator must see why.
            _emit(_event("threshold", outcome))
        try:
            response = await _call_model(handler, current)
        except Exception as exc:
            if not is_context_overflow(exc):
                raise
            retry = await self._overflow_retry(current, exc, thread_id)
            current = current.override(messages=_as_any(retry.messages))
            response = await _call_model(handler, current)
            outcome = _merge(outcome, retry)
        stamp_request_tokens(
            response.result,
            compressor.counter.count_request(
                current.system_message, current.tools, current.messages
            ),
        )
        if outcome is None or not outcome.changed:
            return response
        update = state_update(outcome, response.result)
        return ExtendedModelResponse(model_response=response, command=Command(update=update))

    async def _overflow_retry(
        self, request: ModelRequest, error: Exception, thread_id: str | None
    ) -> CompressionOutcome:
        """Force compression after a provider overflow; re-raise ``error`` if it cannot help."""
        compressor = self.compressor
        size = compressor.count(
            request.messages, system_message=request.system_message, tools=request.tools
        )
        try:
            forced = await compressor.compress(
                request.messages,
                thread_id=thread_id,
                system_message=request.system_message,
                tools=request.tools,
                force=True,
                reason="overflow",
            )
        except (NothingToCompress, SummaryError) as exc:
            log.warning("overflow_compression_failed", thread_id=thread_id, error=str(exc))
            raise error from exc
        if forced.after_tokens >= size:
            log.warning(
                "overflow_not_reduced", thread_id=thread_id, before=size, after=forced.after_tokens
            )
            raise error
        _emit(_event("overflow", forced))
        return forced


async def _call_model(
    handler: Callable[[ModelRequest], Awaitable[ModelResponse]], request: ModelRequest
) -> ModelResponse:
    """One model call, traced with the provider-reported token usage."""
    with telemetry.tracer().start_as_current_span("model.call") as span:
        span.set_attribute("threadkeeper.messages", len(request.messages))
        response = await handler(request)
        for message in response.result:
            usage = getattr(message, "usage_metadata", None) or {}
            if usage:
                span.set_attribute("gen_ai.usage.input_tokens", int(usage.get("input_tokens", 0)))
                span.set_attribute("gen_ai.usage.output_tokens", int(usage.get("output_tokens", 0)))
        return response


def _as_any(messages: Sequence[BaseMessage]) -> list[AnyMessage]:
    return cast("list[AnyMessage]", list(messages))


def _event(reason: str, outcome: CompressionOutcome) -> dict[str, Any]:
    """The compression event of an applied automatic compression (also counted in metrics)."""
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
    }
