"""Transient provider failures ridden out: retried with backoff, bounded per call and per run.

A provider under load answers 429 (often with ``Retry-After``), 503 "overloaded", or drops the
connection mid-stream; one such answer must not fail a user's turn. What is retried and what is
not is ``app.agents.provider_errors.is_transient`` (never a 400, 401, 404 or a context overflow:
the summary middleware, outside this one, summarizes and retries an overflow itself).

LangChain's ``ModelRetryMiddleware`` is the base (its parameters, its validation, its
``retry_on``), but its loop is replaced: it ignores ``Retry-After``, has no per-run bound and no
hook for the run's events and metrics. The loop is tenacity's (wait, stop, before-sleep hooks).

Each failed attempt becomes a ``provider_retry`` custom stream event (``retrying`` with the
wait, or ``gave_up``), which the worker stores with the run's events, and the
``threadkeeper_provider_*`` metrics count it. ``max_concurrency`` caps the calls in flight to the
model from this process (the slot is held only while calling, never while backing off), so a
worker does not cause its own 429 storm.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import structlog
from langchain.agents.middleware import ModelRetryMiddleware
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.messages import AIMessage
from langgraph.errors import GraphBubbleUp
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from app import metrics
from app.agents.context import AgentContext, RunCounters
from app.agents.provider_errors import (
    is_connection_failure,
    is_transient,
    provider_code,
    provider_status,
    retry_after,
)

log = structlog.get_logger(__name__)

#: First backoff (seconds), doubled per attempt up to ``MAX_DELAY``, with +-25% jitter.
INITIAL_DELAY = 0.5
MAX_DELAY = 20.0
JITTER = 0.25


def failure_kind(exc: BaseException) -> str:
    """The metrics label of a transient failure: rate_limited, server_error or connection."""
    status = provider_status(exc)
    if status == 429:
        return "rate_limited"
    if status is not None:
        return "server_error"
    return "connection" if is_connection_failure(exc) else "server_error"


class ProviderRetryMiddleware(ModelRetryMiddleware[Any, Any]):  # type: ignore[type-var]
    def __init__(
        self,
        *,
        model: str,
        max_retries: int = 4,
        max_wait_seconds: float = 60.0,
        run_max_retries: int = 12,
        max_concurrency: int | None = None,
    ) -> None:
        super().__init__(
            max_retries=max_retries,
            retry_on=is_transient,
            on_failure="error",
            backoff_factor=2.0,
            initial_delay=INITIAL_DELAY,
            max_delay=MAX_DELAY,
            jitter=True,
        )
        #: The agent's model, ``provider:model`` (events and logs name the model called).
        self.model = model
        #: Seconds one call may spend waiting between its attempts, all waits together.
        self.max_wait_seconds = max_wait_seconds
        #: Retries one run may make over all its model calls.
        self.run_max_retries = run_max_retries
        self.max_concurrency = max_concurrency
        #: One cap per model called (the agent's, each fallback's), by identity.
        self._slots: dict[int, asyncio.Semaphore] = {}

    @property
    def name(self) -> str:
        return "ProviderRetryMiddleware"

    # --- the delay ------------------------------------------------------------------------------
    def delay(self, attempt: int, exc: BaseException) -> float:
        """Before attempt ``attempt + 1``: the provider's ``Retry-After`` when it gave one (never
        less), else exponential backoff with jitter."""
        backoff = min(self.initial_delay * self.backoff_factor ** (attempt - 1), self.max_delay)
        backoff *= 1 + random.uniform(-JITTER, JITTER)
        asked = retry_after(exc)
        return max(asked, 0.0) if asked is not None else max(backoff, 0.0)

    # --- the call ---------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _slot(self, model: Any) -> AsyncIterator[None]:
        if not self.max_concurrency:
            yield
            return
        slots = self._slots.setdefault(id(model), asyncio.Semaphore(self.max_concurrency))
        started = time.monotonic()
        async with slots:
            metrics.MODEL_SLOT_WAIT.observe(time.monotonic() - started)
            yield

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage:
        counters = _counters(request)
        model = model_label(request.model, self.model)
        waited = 0.0

        def retryable(exc: BaseException) -> bool:
            return not isinstance(exc, GraphBubbleUp) and is_transient(exc)

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            return 0.0 if exc is None else self.delay(state.attempt_number, exc)

        def give_up(state: RetryCallState) -> bool:
            # tenacity computes the wait first: the bound checked is the wait to be slept.
            exc = state.outcome.exception() if state.outcome else None
            over = (
                state.attempt_number > self.max_retries
                or waited + state.upcoming_sleep > self.max_wait_seconds
                or counters.provider_retries >= self.run_max_retries
            )
            if over and exc is not None:
                self._report(exc, model, state.attempt_number, 0.0, "gave_up")
            return over

        def before_sleep(state: RetryCallState) -> None:
            nonlocal waited
            exc = state.outcome.exception() if state.outcome else None
            assert exc is not None
            waited += state.upcoming_sleep
            counters.provider_retries += 1
            self._report(exc, model, state.attempt_number, state.upcoming_sleep, "retrying")

        retrying = AsyncRetrying(
            retry=retry_if_exception(retryable),
            stop=give_up,
            wait=wait,
            before_sleep=before_sleep,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                async with self._slot(request.model):
                    return await handler(request)
        raise AssertionError("unreachable: tenacity re-raises the last failure")

    def _report(
        self, exc: BaseException, model: str, attempt: int, wait: float, outcome: str
    ) -> None:
        status, code, kind = provider_status(exc), provider_code(exc), failure_kind(exc)
        if outcome == "retrying":
            metrics.PROVIDER_RETRIES.labels(kind).inc()
            metrics.PROVIDER_RETRY_WAIT.observe(wait)
        else:
            metrics.PROVIDER_GIVE_UPS.labels(kind).inc()
        log.info(
            "provider_retry" if outcome == "retrying" else "provider_gave_up",
            model=model,
            attempt=attempt,
            wait_seconds=round(wait, 3),
            provider_status=status,
            provider_code=code,
            error_type=type(exc).__name__,
        )
        write_event(
            {
                "type": "provider_retry",
                "outcome": outcome,
                "attempt": attempt,
                "wait_seconds": round(wait, 3),
                "provider_status": status,
                "provider_code": code,
                "model": model,
            }
        )


def model_label(model: Any, default: str) -> str:
    """The model a request calls, by name (a fallback's own), else the agent's."""
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    return str(name) if isinstance(name, str) and name else default


def _counters(request: ModelRequest[Any]) -> RunCounters:
    context = getattr(request.runtime, "context", None)
    if isinstance(context, AgentContext):
        return context.counters
    return RunCounters()  # outside a run (a direct graph call): bounded per call only


def write_event(event: dict[str, Any]) -> None:
    """Into the graph's ``custom`` stream when there is one (a run), else nowhere."""
    from langgraph.config import get_stream_writer

    with contextlib.suppress(Exception):  # no stream outside a graph run: metrics still count
        get_stream_writer()(event)
