"""Small helpers over LangChain messages shared by the worker, the state endpoint and tests."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage

MARKER = "threadkeeper"


def message_text(message: BaseMessage) -> str:
    """The text of a message whether its content is a string or a list of blocks."""
    # ``str()``: ``.text`` is a ``TextAccessor`` (a str subclass msgspec refuses to encode).
    return str(message.text) if isinstance(message.content, list) else str(message.content or "")


def marker(message: BaseMessage) -> dict[str, Any]:
    value = (message.additional_kwargs or {}).get(MARKER)
    return value if isinstance(value, dict) else {}


def offload_info(message: BaseMessage) -> dict[str, Any] | None:
    value = marker(message).get("offloaded")
    return value if isinstance(value, dict) else None
