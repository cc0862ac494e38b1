"""Resume decisions are checked against what the interrupt offered and the tool's schema."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.tools import tool

from app.api.error_codes import status_of
from app.domain.errors import InvalidToolArguments, ValidationFailed
from app.services.runs import ReviewDecision, hitl_decisions


@tool("lookup")
def lookup(query: str, limit: int = 3) -> str:
    """Look something up."""
    return query * limit


def interrupt(*allowed: str) -> dict[str, Any]:
    return {
        "action_requests": [{"name": "lookup", "args": {"query": "q"}, "description": ""}],
        "review_configs": [{"action_name": "lookup", "allowed_decisions": list(allowed)}],
    }


def test_a_decision_the_interrupt_does_not_offer_is_refused() -> None:
    offered = interrupt("approve", "reject")
    with pytest.raises(ValidationFailed, match="'edit' is not allowed for lookup"):
        hitl_decisions(offered, [ReviewDecision(type="edit", args={"query": "x"})])
    with pytest.raises(ValidationFailed, match="'respond' is not allowed"):
        hitl_decisions(offered, [ReviewDecision(type="respond", message="hi")])
    assert hitl_decisions(offered, [ReviewDecision(type="reject", message="no")]) == {
        "decisions": [{"type": "reject", "message": "no"}]
    }


def test_respond_and_edit_become_the_middlewares_payload() -> None:
    offered = interrupt("approve", "edit", "reject", "respond")
    tools = {"lookup": lookup}
    assert hitl_decisions(offered, [ReviewDecision(type="respond", message="42")], tools) == {
        "decisions": [{"type": "respond", "message": "42"}]
    }
    edit = ReviewDecision(type="edit", args={"query": "x", "limit": 2})
    assert hitl_decisions(offered, [edit], tools) == {
        "decisions": [
            {
                "type": "edit",
                "edited_action": {"name": "lookup", "args": {"query": "x", "limit": 2}},
            }
        ]
    }
    with pytest.raises(InvalidToolArguments, match="query: Field required"):
        hitl_decisions(offered, [ReviewDecision(type="edit", args={"limit": 2})], tools)
    assert InvalidToolArguments.code == "invalid_tool_arguments"
    assert status_of(InvalidToolArguments.code) == 422
