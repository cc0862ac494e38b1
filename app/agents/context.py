"""Per-run context handed to the graph (``context=``) and read by tools and middleware."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AgentContext:
    owner_id: str
    thread_id: str
