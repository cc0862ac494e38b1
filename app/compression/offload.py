"""The offload pass (DESIGN 3, step 2): large tool results go to the Workdir, previews stay.

No model call and nothing lost: the full text stays readable with ``read_workdir_file`` and
findable through the thread's index and ``search_workdir``. A pass writes its originals and their
index entries in one batched Workdir call; a write the Workdir refuses leaves that message
verbatim and says why (the rest of the batch still shrinks).
Input messages are never mutated: changed messages are copies (``model_copy``) keeping their
ids, so the graph's add_messages reducer replaces them in place.

``deterministic_pass`` offloads in one sweep; ``offload_pass`` is the compressor's step: which
sweeps, in which order, so the already-sent (cached) prefix changes as rarely as possible.
"""

from __future__ import annotations

import errno
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from app.compression.cuts import is_compacted, new_input_start
from app.compression.messages import MARKER, marker
from app.compression.previews import build_preview
from app.compression.recall import index_fields
from app.compression.summary_messages import is_offloaded
from app.compression.tokens import Measurement, TokenCounter
from app.compression.tool_names import RECOVERY_TOOLS
from app.compression.workdir import (
    OffloadRecord,
    ToolResultText,
    Workdir,
    WorkdirError,
    WorkdirIndexError,
    WorkdirPathError,
)

log = structlog.get_logger(__name__)

#: Characters of preview per token of ``tool_result_preview_tokens`` (JSON/ids run ~3 chars/token).
PREVIEW_CHARS_PER_TOKEN = 3
DEFAULT_PROTECTED_TOOLS: frozenset[str] = RECOVERY_TOOLS


def workdir_failure_reason(exc: BaseException) -> str:
    """Why an offload failed, without paths: ``ENOSPC (No space left on device)``..."""
    if isinstance(exc, WorkdirIndexError):  # its cause is the database's, not the disk's
        return "workdir index unavailable"
    cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
    if isinstance(cause, OSError) and cause.errno is not None:
        name = errno.errorcode.get(cause.errno, str(cause.errno))
        return f"{name} ({cause.strerror or 'I/O error'})"
    if isinstance(exc, WorkdirPathError):
        return "unusable workdir path"
    return "workdir root missing or not a directory"


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


def _previewed(
    message: ToolMessage,
    tool_name: str,
    text: str,
    record: OffloadRecord,
    *,
    budget_chars: int,
    original_tokens: int,
) -> ToolMessage:
    """A copy of ``message`` (same id) showing the preview, its marker naming the original."""
    meta = {
        **marker(message),
        "offloaded": {
            "path": record.path,
            "sha256": record.sha256,
            "chars": record.chars,
            "bytes": record.bytes,
            "original_tokens": original_tokens,
        },
    }
    return message.model_copy(
        update={
            "content": build_preview(tool_name, text, record, budget_chars),
            "name": message.name or tool_name or None,
            "additional_kwargs": {**message.additional_kwargs, MARKER: meta},
        },
        deep=False,
    )


_Candidate = tuple[ToolMessage, str, dict[str, Any], str, int]


def _candidate(
    message: BaseMessage,
    calls: dict[str, tuple[str, dict[str, Any]]],
    counter: TokenCounter,
    preview_tokens: int,
    protected_tools: Collection[str],
) -> _Candidate | None:
    """``(message, tool name, args, text, tokens)`` when ``message`` is a tool result the pass
    offloads: not yet offloaded, not protected, plain text, larger than ``preview_tokens``."""
    if not isinstance(message, ToolMessage) or is_offloaded(message):
        return None
    tool_name, args = calls.get(message.tool_call_id, ("", {}))
    tool_name = message.name or tool_name
    if tool_name in protected_tools:
        return None
    original_tokens = counter.count_message(message)
    if original_tokens <= preview_tokens:
        return None
    text = _plain_text(message)
    if text is None:
        return None
    return message, tool_name, args, text, original_tokens


@dataclass(frozen=True, slots=True)
class _Planned:
    """A candidate of a batch: its preview sized before its original is written."""

    index: int
    candidate: _Candidate
    expected: OffloadRecord
    replacement: ToolMessage
    saving: int


def _plan(
    index: int,
    candidate: _Candidate,
    workdir: Workdir,
    thread_id: str,
    counter: TokenCounter,
    budget_chars: int,
) -> _Planned | None:
    """The candidate with the preview it gets if stored under its usual name; None when that
    preview would not be smaller (nothing to gain: its original is not written)."""
    message, tool_name, _, text, original_tokens = candidate
    expected = workdir.expected_record(thread_id, message.tool_call_id, text)
    replacement = _previewed(
        message,
        tool_name,
        text,
        expected,
        budget_chars=budget_chars,
        original_tokens=original_tokens,
    )
    saving = original_tokens - counter.count_message(replacement)
    return _Planned(index, candidate, expected, replacement, saving) if saving > 0 else None


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
    the view is under it (``None`` offloads every candidate). The originals are written as one
    batch (``Workdir.write_tool_results``: one ``put_many``, one index transaction): the
    candidates, oldest first, whose previews bring the view under ``stop_below``; when writes
    fail and the view is still over it, the next candidates make the next batch. A message
    is shrunk only when its own original is stored and indexed: a failed write (or index
    transaction) leaves it unchanged and its reason is appended to ``failures``, while the
    rest of its batch may shrink. Returns copies; inputs are not mutated.
    """
    view = list(messages)
    offloaded: list[OffloadRecord] = []
    calls = _calls_by_id(messages)
    running = base_tokens + counter.count_messages(view) if stop_below is not None else 0
    budget_chars = max(preview_tokens * PREVIEW_CHARS_PER_TOKEN, 600)
    index = start
    while index < len(messages) and (stop_below is None or running >= stop_below):
        batch: list[_Planned] = []
        expected = running
        while index < len(messages) and (stop_below is None or expected >= stop_below):
            candidate = _candidate(messages[index], calls, counter, preview_tokens, protected_tools)
            planned = candidate and _plan(
                index, candidate, workdir, thread_id, counter, budget_chars
            )
            if planned:
                batch.append(planned)
                expected -= planned.saving
            index += 1
        records = await store_originals(workdir, thread_id, [p.candidate for p in batch], failures)
        for planned, record in zip(batch, records, strict=True):
            if record is None:
                continue
            message, tool_name, _, text, original_tokens = planned.candidate
            replacement, saving = planned.replacement, planned.saving
            if (record.path, record.sha256) != (planned.expected.path, planned.expected.sha256):
                # Stored under another name (a reused tool-call id): the preview names it.
                replacement = _previewed(
                    message,
                    tool_name,
                    text,
                    record,
                    budget_chars=budget_chars,
                    original_tokens=original_tokens,
                )
                saving = original_tokens - counter.count_message(replacement)
            if saving <= 0:
                continue
            view[planned.index] = replacement
            offloaded.append(record)
            running -= saving
    return view, offloaded


async def store_originals(
    workdir: Workdir,
    thread_id: str,
    candidates: Sequence[_Candidate],
    failures: list[str] | None = None,
) -> list[OffloadRecord | None]:
    """Write the candidates' originals and index entries as one batch; per candidate its
    record, or None (logged, reason appended to ``failures``) when the Workdir refused it."""
    if not candidates:
        return []
    results = [
        ToolResultText(message.tool_call_id, text, index_fields(tool_name, args, text))
        for message, tool_name, args, text, _ in candidates
    ]
    outcomes: Sequence[OffloadRecord | WorkdirError | WorkdirPathError]
    try:
        outcomes = await workdir.write_tool_results(thread_id, results)
    except (WorkdirError, WorkdirPathError) as exc:  # the whole batch (no usable thread key)
        outcomes = [exc] * len(results)
    records: list[OffloadRecord | None] = []
    for (message, *_), outcome in zip(candidates, outcomes, strict=True):
        if isinstance(outcome, OffloadRecord):
            records.append(outcome)
            continue
        log.warning(
            "workdir_offload_failed",
            thread_id=thread_id,
            tool_call_id=message.tool_call_id,
            error=str(outcome),
        )
        if failures is not None:
            failures.append(workdir_failure_reason(outcome))
        records.append(None)
    return records


async def keep_originals(
    messages: Sequence[BaseMessage],
    *,
    thread_id: str,
    workdir: Workdir,
    protected_tools: Collection[str] = DEFAULT_PROTECTED_TOOLS,
) -> int:
    """Store (and index) every not yet offloaded tool result about to be summarized away,
    whatever its size, as one batch, so the summary never loses an original; returns the
    index size."""
    calls = _calls_by_id(messages)
    batch: list[_Candidate] = []
    for message in messages:
        if not isinstance(message, ToolMessage) or is_offloaded(message):
            continue
        tool_name, args = calls.get(message.tool_call_id, ("", {}))
        tool_name = message.name or tool_name
        text = _plain_text(message)
        if tool_name in protected_tools or text is None:
            continue
        batch.append((message, tool_name, args, text, 0))
    await store_originals(workdir, thread_id, batch)
    try:
        return await workdir.index_size(thread_id)
    except (WorkdirError, WorkdirPathError):
        return 0


# --- the cache-aware pass (the compressor's step 2) ---------------------------------------------
@dataclass(frozen=True, slots=True)
class Offloader:
    """``deterministic_pass`` bound to one thread's Workdir and the compressor's budget."""

    workdir: Workdir
    thread_id: str
    counter: TokenCounter
    preview_tokens: int
    protected_tools: Collection[str]

    def has_candidates(self, view: Sequence[BaseMessage]) -> bool:
        """Whether a forced pass over ``view`` has a tool result to offload."""
        calls = _calls_by_id(view)
        return any(
            _candidate(m, calls, self.counter, self.preview_tokens, self.protected_tools)
            for m in view
        )

    async def __call__(
        self,
        view: Sequence[BaseMessage],
        base: int,
        *,
        stop_below: int | None,
        failures: list[str],
        start: int = 0,
    ) -> tuple[list[BaseMessage], list[OffloadRecord]]:
        return await deterministic_pass(
            view,
            thread_id=self.thread_id,
            workdir=self.workdir,
            counter=self.counter,
            preview_tokens=self.preview_tokens,
            protected_tools=self.protected_tools,
            stop_below=stop_below,
            base_tokens=base,
            start=start,
            failures=failures,
        )


@dataclass(slots=True)
class OffloadResult:
    view: list[BaseMessage]
    offloaded: list[OffloadRecord] = field(default_factory=list)
    #: One reason per result the Workdir refused (it stayed verbatim).
    failures: list[str] = field(default_factory=list)


async def offload_pass(
    messages: Sequence[BaseMessage],
    measured: Measurement,
    *,
    offloader: Offloader | None,
    force: bool,
) -> OffloadResult:
    """Step 2, cache-aware. ``offloader`` None: no Workdir (or no thread), nothing offloaded.
    ``force`` (manual path, overflow retry): every large result, whatever the size."""
    result = OffloadResult(list(messages))
    if offloader is None:
        return result
    counter = offloader.counter
    fresh = new_input_start(result.view)
    if not force and is_compacted(result.view[:fresh], result.view[fresh:]):
        # Append-only once compacted: a large result the model has not been sent yet
        # arrives as a preview. It is the tail, so no cached prefix is lost; kept verbatim
        # it would only force a rewrite of the cached prefix at the next crossing.
        result.view, result.offloaded = await offloader(
            result.view, measured.base, stop_below=None, start=fresh, failures=result.failures
        )
    if not force and not measured.over(result.view, counter):
        return result
    if not force:
        # Cache-aware first: results the model was never sent shrink for free (the
        # previous request stays an unchanged prefix of this one).
        result.view, more = await offloader(
            result.view,
            measured.base,
            stop_below=measured.limit,
            start=fresh,
            failures=result.failures,
        )
        result.offloaded += more
    if force or measured.over(result.view, counter):
        # Rewriting the cached part is unavoidable now: offload every large result in
        # one step so the next crossing is many turns away, never a trickle per turn.
        result.view, more = await offloader(
            result.view, measured.base, stop_below=None, failures=result.failures
        )
        result.offloaded += more
    return result
