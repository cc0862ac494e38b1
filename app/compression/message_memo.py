"""A value computed from a message, remembered per message object while the object is unchanged.

Why: the compression check before every model call (and the offline model's usage figure)
measures the whole view, and within a run the view holds the same message objects call after
call. Fingerprinting each message's content to find its cached count costs more than a dict
lookup, and that cost grew with the view on every call; this memo answers an unchanged object
from a dict keyed by its ``id()``.

A hit needs the fields the value is computed from to be equal to what they were: ``content`` (a
str is kept as is, a block list as a deep copy), ``name``, ``tool_call_id`` and, for AI messages,
the tool calls (deep copies). Any change is a miss and the value is computed again. A message
with an id is remembered by its type and id: each run reads the thread's history from its
checkpoint as fresh objects, and remembering those by object cost a snapshot and a weak
reference per history message on every turn; an equal message of the same id and type has the
same value (``compute`` may read only those fields and the type). A message without an id is
remembered per live object (held by a weak reference: the memo never keeps a message alive, and
the entry leaves with its message).
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

T = TypeVar("T")

#: Live entries kept at most; past that the memo starts over (it is only a cache).
DEFAULT_MAX_OBJECTS = 65_536
#: Entries by message id kept at most (they outlive their messages: a few views' worth, so the
#: garbage collector does not walk a growing heap of them).
DEFAULT_MAX_IDS = 8_192


@dataclass(slots=True)
class _Entry(Generic[T]):
    ref: weakref.ReferenceType[BaseMessage]
    fields: tuple[Any, ...]
    value: T


def _fields(message: BaseMessage) -> tuple[Any, ...]:
    """What the value may depend on, as compared on a hit (cheap when nothing changed: the
    same str object compares equal in O(1), so do empty tool-call lists)."""
    calls: Any = None
    tool_call_id = None
    if isinstance(message, AIMessage):
        calls = (message.tool_calls, message.invalid_tool_calls)
    elif isinstance(message, ToolMessage):
        tool_call_id = message.tool_call_id
    # (Not ``getattr(message, "tool_call_id", None)``: a missing attribute goes through
    # pydantic's ``__getattr__`` and costs more than everything else here together.)
    return (message.content, message.name, tool_call_id, calls)


def _detached(value: Any) -> Any:
    """A deep copy of JSON-like data (what contents and tool calls are), faster than
    ``copy.deepcopy`` for it; anything else goes through ``copy.deepcopy``."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {key: _detached(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_detached(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_detached(item) for item in value)
    return copy.deepcopy(value)


def _snapshot(fields: tuple[Any, ...]) -> tuple[Any, ...]:
    """``fields`` detached from the message: mutable parts (block lists, tool calls) copied."""
    content, name, tool_call_id, calls = fields
    if not isinstance(content, str):
        content = _detached(content)
    if calls is not None and (calls[0] or calls[1]):
        calls = _detached(calls)
    return (content, name, tool_call_id, calls)


class MessageMemo(Generic[T]):
    """``memo(message)`` is ``compute(message)``, computed once per unchanged message object."""

    def __init__(
        self,
        compute: Callable[[BaseMessage], T],
        *,
        max_objects: int = DEFAULT_MAX_OBJECTS,
        max_ids: int = DEFAULT_MAX_IDS,
    ) -> None:
        self._compute = compute
        self._max_objects = max_objects
        self._max_ids = max_ids
        self._entries: dict[int, _Entry[T]] = {}
        self._by_id: dict[tuple[str, str], tuple[tuple[Any, ...], T]] = {}

    def __call__(self, message: BaseMessage) -> T:
        fields = _fields(message)
        if message.id is not None:
            return self._by_message_id((message.type, message.id), message, fields)
        key = id(message)
        entry = self._entries.get(key)
        if entry is not None and entry.ref() is message and entry.fields == fields:
            return entry.value
        value = self._compute(message)
        self._remember(key, message, fields, value)
        return value

    def _by_message_id(
        self, key: tuple[str, str], message: BaseMessage, fields: tuple[Any, ...]
    ) -> T:
        found = self._by_id.get(key)
        if found is not None and found[0] == fields:
            return found[1]
        value = self._compute(message)
        if len(self._by_id) >= self._max_ids:
            self._by_id.clear()
        try:
            self._by_id[key] = (_snapshot(fields), value)
        except Exception:  # a part that cannot be copied: not remembered
            self._by_id.pop(key, None)
        return value

    def _remember(self, key: int, message: BaseMessage, fields: tuple[Any, ...], value: T) -> None:
        if len(self._entries) >= self._max_objects:
            self._entries.clear()
        entries = self._entries

        def forget(ref: weakref.ReferenceType[BaseMessage]) -> None:
            # Only this object's entry: a recount may have replaced it with a newer one.
            current = entries.get(key)
            if current is not None and current.ref is ref:
                entries.pop(key, None)

        try:
            ref = weakref.ref(message, forget)
            snapshot = _snapshot(fields)
        except Exception:  # no weak references, or a part that cannot be copied: not remembered
            return
        entries[key] = _Entry(ref, snapshot, value)

    def __len__(self) -> int:
        return len(self._entries) + len(self._by_id)

    def clear(self) -> None:
        self._entries.clear()
        self._by_id.clear()
