"""Summary middleware: keeps every model request under ONE token threshold (DESIGN 3).

The algorithm, in named steps, cheapest and least lossy first:

1. ``measure``: count the request (system prompt + tool schemas + messages) in the provider's
   measure; below the threshold: send as is;
2. ``offload_pass``: offload large tool results to the Workdir and show a preview instead
   (``app.compression.offload``; no model call, nothing lost). Cache-aware order: results the model
   was never sent go first (the cached prefix stays intact); if a rewrite of the sent part is
   needed, every large result goes in that one step. Once compacted, new large results arrive
   as previews (append-only view);
3. re-measure (``Measurement.of``): under the threshold now, send; the summarizer is not called;
4. ``summarize_step``: summarize the oldest part (``plan_summary``), keep the recent part and
   always the current user turn verbatim, never splitting an AI tool call from its tool
   results. The summary the view already starts with is not rewritten: the new part becomes a
   segment right after it (cached prefix kept, ``plan_segment``), until the segments would
   exceed ``summary_max_tokens`` and are folded into one in the same summarizer call. The kept
   part is capped (``keep_budget``) so the summary and one more turn fit under the threshold
   (``app.compression.budget``); a view still over it then holds only the current turn, and the
   outcome says ``turn_alone_exceeds`` instead of summarizing again;
5. ``SummaryMiddleware._overflow_retry``: a provider context-overflow error forces steps 2-4
   and one retry with a strictly smaller request.

Each step is a function of messages and plain values (a Workdir, a counter, a summarizer), so
each rule is unit-testable without a database; ``ContextCompressor`` chains them and is shared by
the middleware (automatic path) and the manual compression service. Input messages are never
mutated: changed messages are copies keeping their ids, so the add_messages reducer replaces
them in the graph state (the full record in the ``messages`` table is not ours to change).
The summary message's vocabulary is in ``app.compression.summary_messages``, token counting and
provider calibration in ``app.compression.tokens``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import structlog
from langchain_core.messages import BaseMessage, SystemMessage

from app import telemetry
from app.compression.budget import Budget, summary_reserve, turn_room
from app.compression.cuts import plan_segment, plan_summary
from app.compression.offload import (
    DEFAULT_PROTECTED_TOOLS,
    Offloader,
    keep_originals,
    offload_pass,
)
from app.compression.outcome import (
    TURN_ALONE_EXCEEDS,
    CompressionOutcome,
)
from app.compression.summarizers import Summarizer, call_summarizer
from app.compression.summary_messages import (
    build_summary_message,
    summarized_count,
    summary_head,
)
from app.compression.tokens import (
    Measurement,
    TokenCounter,
    measure,
    provider_ratio,
    scale,
)
from app.compression.workdir import INDEX_PATH, Workdir
from app.config import CompressionSettings
from app.domain.errors import NothingToCompress, WorkdirUnavailable

log = structlog.get_logger(__name__)

#: The compressor's keyword defaults are the compression group's (written once, in app.config).
_DEFAULTS = CompressionSettings()


# --- the algorithm ------------------------------------------------------------------------------
class ContextCompressor:
    """Chains the steps on a model view; shared by the middleware and the manual service path."""

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

    def offloader(self, thread_id: str | None) -> Offloader | None:
        """The offload pass for this thread; None without a Workdir or a thread."""
        if self.workdir is None or not thread_id:
            return None
        return Offloader(
            self.workdir, thread_id, self.counter, self.preview_tokens, self.protected_tools
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
        if force and not self.can_compress(
            messages, thread_id=thread_id, system_message=system_message, tools=tools
        ):
            raise NothingToCompress(
                "history too short to compress: nothing to offload or summarize",
                tokens=self.count(messages, system_message=system_message, tools=tools),
            )
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
        measured = measure(
            messages,
            counter=self.counter,
            threshold=self.summary_threshold,
            system_message=system_message,
            tools=tools,
        )
        before = scale(measured.before, measured.ratio)
        offload = await offload_pass(
            messages, measured, offloader=self.offloader(thread_id), force=force
        )
        middle = measured.of(offload.view, self.counter)
        if not force and not offload.offloaded and middle < measured.limit:
            return CompressionOutcome(
                offload.view, before, before, offload_failures=offload.failures
            )
        if offload.failures and require_offload:
            raise WorkdirUnavailable(
                f"{len(offload.failures)} tool result(s) had to be offloaded but the workdir "
                f"could not be written ({offload.failures[0]}); nothing was changed",
                reason=offload.failures[0],
                failed=len(offload.failures),
            )
        offload_only = CompressionOutcome(
            offload.view,
            before,
            scale(middle, measured.ratio),
            offload.offloaded,
            replaced=[
                new for new, old in zip(offload.view, messages, strict=True) if new is not old
            ],
            offload_failures=offload.failures,
        )
        if not force and middle < measured.limit:
            return offload_only
        cut = plan_summary(
            offload.view, counter=self.counter, keep_recent_tokens=self.keep_budget(measured)
        )
        if cut <= summary_head(offload.view):
            if force and not offload_only.replaced:
                raise NothingToCompress(
                    "history too short to compress: nothing to offload or summarize",
                    tokens=before,
                )
            return self._flag_over(offload_only, measured)
        summarized = await self.summarize_step(
            offload_only, cut, measured=measured, thread_id=thread_id, reason=reason
        )
        return self._flag_over(summarized, measured)

    # --- the budget: no thrash ------------------------------------------------------------------
    @property
    def budget(self) -> Budget:
        return Budget(
            threshold=self.summary_threshold,
            preview_tokens=self.preview_tokens,
            keep_recent_tokens=self.keep_recent_tokens,
            summary_max_tokens=self.summary_max_tokens,
        )

    def keep_budget(self, measured: Measurement) -> int:
        """Recent history kept verbatim (raw count): keep-recent in the provider's measure, but
        never more than leaves the summary and one more turn room under the threshold, so a
        summary always ends below it unless the current turn alone does not fit. (With a budget
        the start check accepted and a provider measuring like us, the cap never binds.)"""
        room = measured.limit - measured.base - summary_reserve(self.summary_max_tokens)
        room -= turn_room(self.budget)
        return max(0, min(int(self.keep_recent_tokens / measured.ratio), room))

    def _flag_over(self, outcome: CompressionOutcome, measured: Measurement) -> CompressionOutcome:
        """Name the outcome when the view is still over the threshold: only the current turn is
        left verbatim then (``keep_budget``), so it is the turn alone that does not fit."""
        if measured.over(outcome.messages, self.counter):
            outcome.over_threshold = TURN_ALONE_EXCEEDS
            outcome.threshold = self.summary_threshold
        return outcome

    def can_compress(
        self,
        messages: Sequence[BaseMessage],
        *,
        thread_id: str | None,
        system_message: SystemMessage | str | None = None,
        tools: Sequence[Any] | None = None,
    ) -> bool:
        """Whether a manual compression (``force``) would change the view: a large tool result
        to offload, or history older than the kept part to summarize. GetAgentState's
        ``manual_compression.available`` and CompressContext's ``nothing_to_compress`` both
        come from this one predicate."""
        if not messages:
            return False
        offloader = self.offloader(thread_id)
        if offloader is not None and offloader.has_candidates(messages):
            return True
        measured = measure(
            messages,
            counter=self.counter,
            threshold=self.summary_threshold,
            system_message=system_message,
            tools=tools,
        )
        keep = self.keep_budget(measured)
        cut = plan_summary(messages, counter=self.counter, keep_recent_tokens=keep)
        return cut > summary_head(messages)

    async def summarize_step(
        self,
        offload_only: CompressionOutcome,
        cut: int,
        *,
        measured: Measurement,
        thread_id: str | None,
        reason: str,
    ) -> CompressionOutcome:
        """Step 4: ``view[head:cut]`` becomes a summary (a new segment, or everything folded);
        the originals of the tool results it summarizes away are kept in the Workdir first."""
        view = offload_only.messages
        head = summary_head(view)
        stack = view[:head]
        plan = plan_segment(stack, counter=self.counter, summary_max_tokens=self.summary_max_tokens)
        to_summarize = view[head:cut]
        indexed = 0
        if self.workdir is not None and thread_id:
            indexed = await keep_originals(
                to_summarize,
                thread_id=thread_id,
                workdir=self.workdir,
                protected_tools=self.protected_tools,
            )
        text = await call_summarizer(
            self.summarizer,
            to_summarize,
            previous=plan.previous,
            max_tokens=plan.max_tokens,
            timeout_seconds=self.summary_timeout_seconds,
            fallback=offload_only,
        )
        summary = build_summary_message(
            text,
            len(to_summarize),
            previous_summarized=summarized_count(stack),
            summary_tokens=self.counter.count_text(text),
            reason=reason,
            # One pointer to the index is enough: a stacked segment names it only if no
            # earlier one does.
            indexed=0 if any(INDEX_PATH in m.text for m in plan.kept) else indexed,
            provider_ratio=measured.ratio,
            offload_failures=offload_only.offload_failures,
        )
        new_view = [*plan.kept, summary, *view[cut:]]
        kept_ids = {id(m) for m in view[cut:]}
        return CompressionOutcome(
            new_view,
            offload_only.before_tokens,
            scale(measured.of(new_view, self.counter), measured.ratio),
            offload_only.offloaded,
            summarized=True,
            summary_text=text,
            summarized_messages=len(to_summarize),
            replaced=[m for m in offload_only.replaced if id(m) in kept_ids],
            offload_failures=offload_only.offload_failures,
        )
