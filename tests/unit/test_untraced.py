"""LangSmith's middleware-hook tracing runs inline while tracing is off, and only then."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterator
from typing import Any

import langsmith
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langsmith import utils as langsmith_utils
from langsmith._internal import _context
from langsmith._runtime_overrides import get_runtime_overrides

from app.agents import untraced
from app.offline.extractive import ExtractiveChatModel
from tests.support.executors import CountingExecutor


class _Passthrough(AgentMiddleware):
    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(request)


@tool
async def query_kb(query: str) -> str:
    """Search the knowledge base."""
    return '{"count": 0, "results": []}'


@pytest.fixture
def no_override() -> Iterator[None]:
    before = get_runtime_overrides().aio_to_thread
    langsmith.set_runtime_overrides()
    yield
    langsmith.set_runtime_overrides(aio_to_thread=before)


@pytest.fixture
def tracing_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    langsmith_utils.get_env_var.cache_clear()
    yield
    monkeypatch.delenv("LANGSMITH_TRACING")
    langsmith_utils.get_env_var.cache_clear()


async def _thread_hops_of_one_turn() -> int:
    agent = create_agent(
        model=ExtractiveChatModel(),
        tools=[query_kb],
        middleware=[_Passthrough()],
        checkpointer=InMemorySaver(),
    )
    loop = asyncio.get_running_loop()
    executor = CountingExecutor()
    loop.set_default_executor(executor)
    try:
        result = await agent.ainvoke(
            {"messages": [HumanMessage("What about leases?")]},
            {"configurable": {"thread_id": "t"}},
        )
    finally:
        loop._default_executor = None  # type: ignore[attr-defined]  # the next user makes a new one
        executor.shutdown()
    assert result["messages"][-1].content  # the turn really ran: tool call, then an answer
    return executor.submitted


async def test_hooks_hop_to_a_thread_without_the_override_and_not_with_it(
    no_override: None,
) -> None:
    assert await _thread_hops_of_one_turn() > 0  # LangSmith's own path: two hops per hook call
    assert untraced.apply() and untraced.applied()
    assert untraced.apply()  # idempotent
    assert await _thread_hops_of_one_turn() == 0


def test_not_applied_while_tracing_is_on(no_override: None, tracing_env: None) -> None:
    assert untraced.apply() is False
    assert not untraced.applied()
    assert get_runtime_overrides().aio_to_thread is None


def test_another_override_is_kept(no_override: None) -> None:
    async def theirs(default: Any, ctx: Any, func: Any, /, *args: Any, **kwargs: Any) -> Any:
        return await default(ctx, func, *args, **kwargs)

    langsmith.set_runtime_overrides(aio_to_thread=theirs)
    assert untraced.apply() is False
    assert get_runtime_overrides().aio_to_thread is theirs


@pytest.mark.parametrize("traced", [False, True])
async def test_a_traced_call_takes_langsmith_own_path(traced: bool) -> None:
    """A context that turned tracing on (``tracing_context(enabled=True)``) is handed to
    LangSmith's default (threaded) implementation; an untraced one runs inline."""
    defaults: list[str] = []

    async def default(ctx: contextvars.Context, func: Any, /, *args: Any) -> Any:
        defaults.append("default")
        return ctx.run(func, *args)

    ctx = contextvars.copy_context()
    ctx.run(_context._TRACING_ENABLED.set, traced)
    out = await untraced._inline_when_untraced(default, ctx, lambda x: x + 1, 41)
    assert out == 42
    assert defaults == (["default"] if traced else [])
