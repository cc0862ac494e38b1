"""What Threadkeeper lends a graph while running it: the thread's agent's compressor (its one
``summary_threshold``, summarizer and Workdir) and its knowledge base search.

A graph of the user's own (``app.agents.own_graph``) is imported before any run and knows none
of Threadkeeper's configuration, so the public ``threadkeeper`` import finds these at call time
here: the worker binds them around each run (a context variable, so concurrent runs of one
process each see their own, and LangGraph's tasks inherit it). Outside Threadkeeper (``langgraph
dev``, a unit test) nothing is bound and the public pieces pass the model call through as is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from app.compression.summary import ContextCompressor

__all__ = ["GraphBinding", "KnowledgeSearch", "active_binding", "bound"]

#: ``(query, limit)`` -> the knowledge base's results (what ``query_kb`` returns, as a dict).
KnowledgeSearch = Callable[[str, int], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class GraphBinding:
    compressor: ContextCompressor
    #: The agent's knowledge base, searched as the run's owner (None: not available).
    search: KnowledgeSearch | None = None


_ACTIVE: ContextVar[GraphBinding | None] = ContextVar("threadkeeper_graph_binding", default=None)


def active_binding() -> GraphBinding | None:
    """The binding of the run this call belongs to; None outside a Threadkeeper run."""
    return _ACTIVE.get()


@contextlib.contextmanager
def bound(binding: GraphBinding | None) -> Iterator[None]:
    """``binding`` is the active one for the code (and the tasks it starts) inside."""
    token = _ACTIVE.set(binding)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
