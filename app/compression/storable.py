"""The one rule that makes text from tools and providers storable.

PostgreSQL refuses two things Python strings may hold: NUL (``text`` and ``jsonb`` cannot carry
it) and lone UTF-16 surrogates (asyncpg cannot encode them: "surrogates not allowed"). A search
backend that cut an emoji in half answers JSON ``"\\ud83d"``, which ``json.loads`` turns into
exactly such a surrogate. Whatever we store (messages, run events, Workdir files, checkpoints)
goes through ``storable_text``: NUL is dropped, each surrogate becomes U+FFFD. The checkpoint
serializer would otherwise turn a surrogate into ``?`` on its own, so the model view and the
full history would disagree.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from langchain_core.messages import BaseMessage

#: NUL and every UTF-16 surrogate code point (a valid pair is never two code points once
#: decoded by ``json``; two separate ones are as unstorable as one).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"

#: Message fields that carry provider or tool text (``response_metadata`` too: it may echo it).
_TEXT_FIELDS = (
    "id",
    "name",
    "tool_call_id",
    "content",
    "tool_calls",
    "invalid_tool_calls",
    "additional_kwargs",
    "response_metadata",
    "artifact",
)

M = TypeVar("M", bound=BaseMessage)


def _replace(match: re.Match[str]) -> str:
    return "" if match.group() == "\x00" else REPLACEMENT


def storable_text(text: str) -> str:
    """``text`` without NUL, each lone surrogate replaced by U+FFFD (unchanged if clean)."""
    if _UNSTORABLE.search(text) is None:
        return text
    return _UNSTORABLE.sub(_replace, text)


def is_storable(value: Any) -> bool:
    """True when ``storable_value(value)`` would change nothing."""
    if isinstance(value, str):
        return _UNSTORABLE.search(value) is None
    if isinstance(value, (list, tuple)):
        return all(is_storable(v) for v in value)
    if isinstance(value, dict):
        return all(is_storable(k) and is_storable(v) for k, v in value.items())
    return True


def storable_value(value: Any) -> Any:
    """``storable_text`` applied to every string (keys too) of a JSON-like value."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, list):
        return [storable_value(v) for v in value]
    if isinstance(value, tuple):
        return tuple(storable_value(v) for v in value)
    if isinstance(value, dict):
        return {storable_value(k): storable_value(v) for k, v in value.items()}
    return value


def storable_message(message: M) -> M:
    """A copy of ``message`` whose text fields are storable (the message itself if they are)."""
    fields = {name: getattr(message, name) for name in _TEXT_FIELDS if hasattr(message, name)}
    dirty = {name: value for name, value in fields.items() if not is_storable(value)}
    if not dirty:
        return message
    return message.model_copy(update={name: storable_value(v) for name, v in dirty.items()})
