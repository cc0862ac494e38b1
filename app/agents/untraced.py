"""LangSmith's ``traceable`` without its two thread hops per call while tracing is off.

Why hand-written: langchain's ``create_agent`` wraps every middleware ``awrap_model_call`` /
``awrap_tool_call`` in ``langsmith.traceable``, whose async wrapper sets up and closes its run
through ``aio_to_thread`` (a thread-pool hop each, GIL handoffs and a loop wake-up) even when
tracing is disabled, where both calls only read context variables. LangSmith's documented hook
for this, ``set_runtime_overrides(aio_to_thread=...)``, lets us run them inline instead.

The override is installed only while tracing is off (``LANGSMITH_TRACING`` unset or false), and
each call still checks the caller's tracing context: a call that traces (a ``tracing_context``
turned it on) takes LangSmith's own thread path unchanged.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import Any

import langsmith
from langsmith import utils as langsmith_utils
from langsmith._runtime_overrides import get_runtime_overrides
from langsmith.run_helpers import get_tracing_context

__all__ = ["applied", "apply"]


def _tracing(ctx: contextvars.Context) -> bool:
    return bool(langsmith_utils.tracing_is_enabled(get_tracing_context(ctx)))


async def _inline_when_untraced(
    default: Callable[..., Awaitable[Any]],
    ctx: contextvars.Context,
    func: Callable[..., Any],
    /,
    *args: Any,
    **kwargs: Any,
) -> Any:
    if _tracing(ctx):
        return await default(ctx, func, *args, **kwargs)
    return ctx.run(func, *args, **kwargs)


def applied() -> bool:
    """Whether this module's override is the one in force."""
    return get_runtime_overrides().aio_to_thread is _inline_when_untraced


def apply() -> bool:
    """Install the override unless tracing is on (cheap and idempotent: called per graph
    invocation); ``True`` when it is in force. Another override already installed is kept."""
    if applied():
        return True
    if langsmith_utils.tracing_is_enabled() or get_runtime_overrides().aio_to_thread is not None:
        return False
    langsmith.set_runtime_overrides(aio_to_thread=_inline_when_untraced)
    return True
