"""Agent factories named by agents files in the tests (``package.module:function``)."""

from __future__ import annotations

from typing import Any

from app.agents.spec import AgentSpec, BudgetSpec


def researcher() -> AgentSpec:
    return AgentSpec(
        id="researcher",
        name="Researcher",
        model="offline",
        knowledge_base="papers",
        compression=BudgetSpec(summary_threshold=9000),
    )


def as_mapping() -> dict[str, Any]:
    return {"id": "mapped", "model": "offline", "tools": ["query_kb"]}


def broken() -> dict[str, Any]:
    return {"id": "broken", "recursion_limit": "many"}
