"""A thread's state as JSON: its messages as GetAgentState describes them, and the state keys a
graph of the user's own keeps besides ``messages`` (what LangGraph's ``values`` show)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, ToolMessage

from app.compression.messages import message_text, offload_info
from app.compression.summary_messages import is_summary_message

__all__ = ["describe_message", "graph_values", "plain_values"]

#: Keys of a ``values`` chunk that are not the graph's state.
_NOT_STATE = frozenset({"messages", "__interrupt__"})


def graph_values(values: Any) -> dict[str, Any]:
    """A graph's state keys besides ``messages``, as JSON (a ``values`` chunk or snapshot)."""
    if not isinstance(values, dict):
        return {}
    return plain_values({k: v for k, v in values.items() if k not in _NOT_STATE})


def plain_values(values: dict[str, Any]) -> dict[str, Any]:
    """A graph's own state keys as JSON (messages and models as their dicts, else ``str``)."""
    return json.loads(json.dumps(values, default=_plain))  # type: ignore[no-any-return]


def _plain(value: Any) -> Any:
    if isinstance(value, BaseMessage):
        return describe_message(value)  # type: ignore[arg-type]
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


def describe_message(m: AnyMessage) -> dict[str, Any]:
    return {
        "id": m.id,
        "type": m.type,
        "content": message_text(m),
        "name": getattr(m, "name", None),
        "tool_calls": (
            [{"id": c.get("id"), "name": c["name"], "args": c["args"]} for c in m.tool_calls]
            if isinstance(m, AIMessage) and m.tool_calls
            else None
        ),
        "tool_call_id": m.tool_call_id if isinstance(m, ToolMessage) else None,
        "offload": offload_info(m),
        "is_summary": is_summary_message(m),
    }
