"""Per-run context handed to the graph (``context=``) and read by tools and middleware."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class RunCounters:
    """What a run has used so far of what is bounded per run (``ProviderRetryMiddleware``)."""

    provider_retries: int = 0


@dataclass(frozen=True, slots=True)
class AgentContext:
    owner_id: str
    thread_id: str
    #: One per run: the worker makes the context once and keeps it across its resumptions.
    counters: RunCounters = field(default_factory=RunCounters)
