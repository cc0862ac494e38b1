"""The compression contract at a model call (DESIGN 3), in the shapes a graph calls a model:

- ``SummaryMiddleware``: a ``create_agent`` middleware with a fixed compressor (Threadkeeper's
  own agents, ``app.agents.graph``);
- ``ThreadkeeperCompression``: the same middleware, finding the compressor of the run it is in
  (``app.compression.binding``): what a user's own ``create_agent`` graph adds (public import
  ``threadkeeper.CompressionMiddleware``);
- ``compressed_model_call`` and ``compression_node``: the same steps around a chat model a
  hand-built ``StateGraph`` node calls (``threadkeeper.compressed_model_call`` /
  ``threadkeeper.compression_node``).

All three run the one algorithm (``ContextCompressor.compress``: measure, offload to the
Workdir with previews, re-measure, summarize), retry once after a provider context overflow
(``overflow_compression``), report each compression as a ``compression`` custom stream event,
and persist the compressed view as a ``messages`` update (``app.compression.outcome``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import structlog
from langchain.agents.middleware.types import (
    AgentMiddleware,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
)
from langchain_core.messages import AnyMessage, BaseMessage, SystemMessage
from langgraph.types import Command

from app.compression.binding import active_binding
from app.compression.outcome import (
    CompressionOutcome,
    compression_event,
    merge_outcomes,
    state_update,
)
from app.compression.overflow import is_context_overflow
from app.compression.summarizers import SummaryError
from app.compression.summary import ContextCompressor
from app.compression.tokens import (
    stamp_request_base,
    stamp_request_tokens,
    traced_model_call,
)
from app.domain.errors import NothingToCompress

__all__ = [
    "SummaryMiddleware",
    "ThreadkeeperCompression",
    "compressed_model_call",
    "compression_node",
    "overflow_compression",
]

log = structlog.get_logger(__name__)


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


async def compress_view(
    compressor: ContextCompressor,
    messages: Sequence[BaseMessage],
    *,
    system_message: SystemMessage | str | None,
    tools: Sequence[Any] | None,
    thread_id: str | None,
) -> CompressionOutcome | None:
    """Steps 1-4 before a model call (None: the summarizer failed with nothing to fall back on);
    the ``compression`` event when something changed, or could not and the operator must see
    why (offloading failed, the turn alone exceeds the threshold)."""
    try:
        outcome: CompressionOutcome | None = await compressor.compress(
            messages, thread_id=thread_id, system_message=system_message, tools=tools
        )
    except SummaryError as exc:
        log.warning(
            "summary_failed", thread_id=thread_id, error=str(exc), cause=repr(exc.__cause__)
        )
        outcome = exc.fallback
    if outcome is not None and (
        outcome.changed or outcome.offload_failures or outcome.over_threshold
    ):
        _emit(compression_event("threshold", outcome))
    return outcome


async def overflow_compression(
    compressor: ContextCompressor,
    messages: Sequence[BaseMessage],
    error: Exception,
    *,
    system_message: SystemMessage | str | None,
    tools: Sequence[Any] | None,
    thread_id: str | None,
) -> CompressionOutcome:
    """Step 5: force compression after a provider overflow; re-raise ``error`` if it cannot
    make the request strictly smaller."""
    size = compressor.count(messages, system_message=system_message, tools=tools)
    try:
        forced = await compressor.compress(
            messages,
            thread_id=thread_id,
            system_message=system_message,
            tools=tools,
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
    _emit(compression_event("overflow", forced))
    return forced


# --- create_agent ---------------------------------------------------------------------------
class SummaryMiddleware(AgentMiddleware):
    """Keeps each model call under the threshold and persists the compressed view."""

    def __init__(self, compressor: ContextCompressor) -> None:
        super().__init__()
        self._fixed = compressor

    def current_compressor(self) -> ContextCompressor | None:
        return self._fixed

    @property
    def compressor(self) -> ContextCompressor | None:
        return self.current_compressor()

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse | ExtendedModelResponse:
        compressor = self.current_compressor()
        if compressor is None:  # not in a Threadkeeper run: the graph's call as it is
            return await handler(request)
        thread_id = _thread_id()
        outcome = await compress_view(
            compressor,
            request.messages,
            system_message=request.system_message,
            tools=request.tools,
            thread_id=thread_id,
        )
        current = request
        if outcome is not None and outcome.changed:
            current = request.override(messages=_as_any(outcome.messages))
        try:
            response = await traced_model_call(handler, current)
        except Exception as exc:
            if not is_context_overflow(exc):
                raise
            retry = await overflow_compression(
                compressor,
                current.messages,
                exc,
                system_message=current.system_message,
                tools=current.tools,
                thread_id=thread_id,
            )
            current = current.override(messages=_as_any(retry.messages))
            response = await traced_model_call(handler, current)
            outcome = merge_outcomes(outcome, retry)
        stamp_request_tokens(
            response.result,
            compressor.counter.count_request(
                current.system_message, current.tools, current.messages
            ),
        )
        stamp_request_base(
            response.result, _base_tokens(compressor, current.system_message, current.tools)
        )
        if outcome is None or not outcome.changed:
            return response
        update = state_update(outcome, response.result)
        return ExtendedModelResponse(model_response=response, command=Command(update=update))


class ThreadkeeperCompression(SummaryMiddleware):
    """``SummaryMiddleware`` for a graph of the user's own: the compressor is the one of the
    Threadkeeper run it is called in (the thread's agent's budget and summarizer); outside
    one, the model call passes through unchanged."""

    def __init__(self) -> None:
        AgentMiddleware.__init__(self)

    def current_compressor(self) -> ContextCompressor | None:
        binding = active_binding()
        return binding.compressor if binding is not None else None


# --- a hand-built graph's node ----------------------------------------------------------------
async def compressed_model_call(
    model: Any,
    messages: Sequence[BaseMessage],
    *,
    system_message: SystemMessage | str | None = None,
    tools: Sequence[Any] | None = None,
    config: Any = None,
) -> list[BaseMessage]:
    """Call ``model`` (a chat model or runnable taking messages, tools already bound) on
    ``messages`` under the run's compression contract; the node's ``messages`` update: the
    reply, preceded by the compressed view when one was made (it replaces the state's).
    ``system_message`` is sent first and, with ``tools``, counted against the threshold."""
    system = (
        SystemMessage(content=system_message)
        if isinstance(system_message, str)
        else (system_message)
    )

    async def call(view: Sequence[BaseMessage]) -> BaseMessage:
        request = [system, *view] if system is not None else list(view)
        reply: BaseMessage = await model.ainvoke(request, config)
        return reply

    binding = active_binding()
    if binding is None:
        return [await call(messages)]
    compressor, thread_id = binding.compressor, _thread_id()
    outcome = await compress_view(
        compressor, messages, system_message=system, tools=tools, thread_id=thread_id
    )
    view = list(outcome.messages) if outcome is not None and outcome.changed else list(messages)
    try:
        reply = await call(view)
    except Exception as exc:
        if not is_context_overflow(exc):
            raise
        retry = await overflow_compression(
            compressor, view, exc, system_message=system, tools=tools, thread_id=thread_id
        )
        view = list(retry.messages)
        reply = await call(view)
        outcome = merge_outcomes(outcome, retry)
    stamp_request_tokens([reply], compressor.counter.count_request(system, tools, view))
    stamp_request_base([reply], _base_tokens(compressor, system, tools))
    if outcome is None or not outcome.changed:
        return [reply]
    return list(state_update(outcome, [reply])["messages"])


def compression_node(
    model: Any,
    *,
    system_prompt: str | None = None,
    tools: Sequence[Any] | None = None,
    messages_key: str = "messages",
) -> Callable[[Any], Awaitable[dict[str, Any]]]:
    """A ``StateGraph`` node calling ``model`` (with ``tools`` bound, when given) on the state's
    messages under the compression contract: ``graph.add_node("model", compression_node(m))``."""
    bound_model = model.bind_tools(list(tools)) if tools else model

    async def node(state: Any) -> dict[str, Any]:
        messages = state[messages_key] if isinstance(state, dict) else getattr(state, messages_key)
        update = await compressed_model_call(
            bound_model, messages, system_message=system_prompt, tools=tools
        )
        return {messages_key: update}

    return node


def _base_tokens(
    compressor: ContextCompressor, system: SystemMessage | str | None, tools: Sequence[Any] | None
) -> int:
    """The request's prompt and tool schemas alone (``request_base``)."""
    counter = compressor.counter
    return counter.count_request(system, tools, []) - counter.count_request(None, None, [])


def _as_any(messages: Sequence[BaseMessage]) -> list[AnyMessage]:
    return cast("list[AnyMessage]", list(messages))
