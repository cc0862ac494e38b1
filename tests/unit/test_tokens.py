"""TokenCounter: exact offline BPE counts, cached so the per-call check stays cheap."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

from app.compression.tokens import (
    ENCODING_NAME,
    MESSAGE_OVERHEAD_TOKENS,
    REQUEST_OVERHEAD_TOKENS,
    TokenCounter,
    get_encoding,
)


class EncodeCountingTokenCounter(TokenCounter):
    """A real counter that records how often text is actually encoded."""

    def __init__(self) -> None:
        super().__init__()
        self.encoded_chars = 0
        self.encode_calls = 0

    def count_text(self, text: str) -> int:
        self.encode_calls += 1
        self.encoded_chars += len(text)
        return super().count_text(text)


@tool
def lookup(query: str, limit: int = 5) -> str:
    """Look something up in the knowledge base."""
    return query * limit


def test_offline_encoding_is_exact_bpe() -> None:
    counter = TokenCounter()
    assert get_encoding().name == ENCODING_NAME
    assert counter.count_text("hello world") == 2
    assert counter.count_text("") == 0
    text = "Threadkeeper keeps context under one budget. " * 50
    assert counter.count_text(text) == len(get_encoding().encode_ordinary(text))
    # special-token text must not raise and is counted as plain text
    assert counter.count_text("<|endoftext|>") > 1


def test_count_message_covers_content_tool_calls_and_name() -> None:
    counter = TokenCounter()
    plain = AIMessage(content="ok", id="a1")
    with_calls = AIMessage(
        content="ok",
        id="a2",
        tool_calls=[{"name": "lookup", "args": {"query": "budget rules " * 20}, "id": "c1"}],
    )
    assert counter.count_message(plain) == MESSAGE_OVERHEAD_TOKENS + 1
    args_tokens = counter.count_text(json.dumps({"query": "budget rules " * 20}))
    assert counter.count_message(with_calls) >= counter.count_message(plain) + args_tokens
    named = HumanMessage(content="hi", name="alice", id="h1")
    assert counter.count_message(named) > counter.count_message(HumanMessage("hi", id="h2"))


def test_list_of_blocks_content_counts_text() -> None:
    counter = TokenCounter()
    text = "a paragraph about retrieval augmented generation " * 10
    as_str = HumanMessage(content=text, id="x1")
    as_blocks = HumanMessage(content=[{"type": "text", "text": text}], id="x2")
    assert counter.count_message(as_str) == counter.count_message(as_blocks)
    with_image = HumanMessage(
        content=[{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": "u"}}],
        id="x3",
    )
    assert counter.count_message(with_image) > counter.count_message(as_blocks)


def test_unchanged_message_is_not_re_encoded() -> None:
    counter = EncodeCountingTokenCounter()
    big = ToolMessage(content="row of data; " * 20_000, tool_call_id="c1", id="t1")
    first = counter.count_message(big)
    encoded = counter.encoded_chars
    assert encoded >= len(big.content)
    # A fresh object with the same id/content (as deserialised from a checkpoint) hits the cache.
    again = ToolMessage(content="row of data; " * 20_000, tool_call_id="c1", id="t1")
    assert counter.count_message(again) == first
    assert counter.count_message(big) == first
    assert counter.encoded_chars == encoded


def test_changed_content_with_same_id_is_recounted() -> None:
    counter = TokenCounter()
    before = counter.count_message(ToolMessage(content="short", tool_call_id="c", id="t"))
    after = counter.count_message(
        ToolMessage(content="much longer " * 30, tool_call_id="c", id="t")
    )
    assert after > before


def test_tool_schema_counts_are_cached() -> None:
    counter = EncodeCountingTokenCounter()
    schema_tokens = counter.count_tool(lookup)
    assert schema_tokens > 10
    calls = counter.encode_calls
    assert counter.count_tool(lookup) == schema_tokens
    assert counter.encode_calls == calls
    as_dict: dict[str, Any] = {
        "type": "function",
        "function": {"name": "x", "description": "d", "parameters": {"type": "object"}},
    }
    assert counter.count_tools([lookup, as_dict]) == schema_tokens + counter.count_tool(as_dict)


def test_count_request_adds_system_tools_and_messages() -> None:
    counter = TokenCounter()
    system = SystemMessage(content="You are helpful.")
    messages = [HumanMessage(content="hello", id="h"), AIMessage(content="hi", id="a")]
    total = counter.count_request(system, [lookup], messages)
    expected = (
        REQUEST_OVERHEAD_TOKENS
        + counter.count_message(system)
        + counter.count_tool(lookup)
        + sum(counter.count_message(m) for m in messages)
    )
    assert total == expected
    assert counter.count_request("You are helpful.", None, messages) == (
        total - counter.count_tool(lookup)
    )


@pytest.mark.parametrize("size", [10, 1000])
def test_cache_is_bounded(size: int) -> None:
    counter = TokenCounter(cache_size=size)
    for i in range(size * 2):
        counter.count_message(HumanMessage(content=f"message {i}", id=f"m{i}"))
    assert counter.cache_info()["messages"] == size
