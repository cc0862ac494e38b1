"""Counts remembered per message object (MessageMemo): a changed message is counted again, an
unchanged one is not, and the cached counts equal uncached ones over random, mutated views."""

from __future__ import annotations

import gc
import json
import random
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from app.compression.message_memo import MessageMemo
from app.compression.messages import message_text
from app.compression.tokens import TokenCounter, count_tokens, count_tokens_cached
from app.offline.extractive import _messages_tokens

WORDS = [
    "lease",
    "worker",
    "claim",
    "thread",
    "budget",
    "token",
    "summary",
    "offload",
    "index",
    "émoji",
    "日本",
    "{}",
    "[]",
    ",",
    ":",
]


class CountingCounter(TokenCounter):
    """A real counter recording how many messages it actually counted (cache misses)."""

    def __init__(self) -> None:
        super().__init__()
        self.counted = 0

    def _count_message_by_content(self, message: BaseMessage) -> int:
        self.counted += 1
        return super()._count_message_by_content(message)


def uncached_count(message: BaseMessage) -> int:
    """The count of a counter that has never seen anything (nothing cached)."""
    return TokenCounter().count_message(message)


def uncached_usage(messages: list[BaseMessage]) -> int:
    """The offline model's input-token figure as it was computed before any caching."""
    total = 0
    for message in messages:
        total += count_tokens(message_text(message))
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                total += count_tokens(call["name"]) + count_tokens(json.dumps(call["args"]))
    return total


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 40)))


def _message(rng: random.Random, i: int) -> BaseMessage:
    kind = rng.randrange(5)
    if kind == 0:
        return HumanMessage(content=_text(rng), id=f"h{i}")
    if kind == 1:
        calls = [
            {"name": rng.choice(["query_kb", "search_workdir"]), "args": {"query": _text(rng)}}
            | {"id": f"c{i}-{k}"}
            for k in range(rng.randint(0, 2))
        ]
        return AIMessage(content=_text(rng), tool_calls=calls, id=f"a{i}")
    if kind == 2:
        return ToolMessage(content=_text(rng), tool_call_id=f"c{i}", name="query_kb", id=f"t{i}")
    if kind == 3:
        blocks: list[Any] = [{"type": "text", "text": _text(rng)}, _text(rng)]
        return HumanMessage(content=blocks, id=f"b{i}")
    return SystemMessage(content=_text(rng), id=f"s{i}")


def _mutate(rng: random.Random, message: BaseMessage) -> None:
    """Change one thing the count depends on, in place, as code holding the object could."""
    choice = rng.randrange(4)
    if choice == 0:
        message.content = _text(rng) + " changed"
    elif choice == 1 and isinstance(message.content, list):
        message.content.append({"type": "text", "text": _text(rng) + " appended"})
    elif choice == 2 and isinstance(message, AIMessage) and message.tool_calls:
        message.tool_calls[0]["args"]["query"] = _text(rng) + " edited"
    else:
        message.name = rng.choice([None, "alice", "bob the builder"])


def test_an_unchanged_object_is_counted_once() -> None:
    counter = CountingCounter()
    view = [_message(random.Random(7), i) for i in range(30)]
    first = counter.count_messages(view)
    assert counter.counted == 30
    for _ in range(5):
        assert counter.count_messages(view) == first
    assert counter.counted == 30


@pytest.mark.parametrize(
    "change",
    ["content", "blocks", "tool_call_args", "tool_calls", "name", "tool_call_id"],
)
def test_a_changed_message_is_counted_again(change: str) -> None:
    counter = TokenCounter()
    ai = AIMessage(content="x", tool_calls=[{"name": "q", "args": {"query": "a"}, "id": "c"}])
    blocks = HumanMessage(content=[{"type": "text", "text": "short"}])
    tool = ToolMessage(content="result", tool_call_id="c1")
    message: BaseMessage = {"blocks": blocks, "tool_call_id": tool}.get(change, ai)
    before = counter.count_message(message)
    if change == "content":
        message.content = "a much longer answer than before " * 5
    elif change == "blocks":
        message.content.append({"type": "text", "text": "another paragraph " * 5})  # type: ignore[union-attr]
    elif change == "tool_call_args":
        ai.tool_calls[0]["args"]["query"] = "a far longer query than the first one " * 3
    elif change == "tool_calls":
        ai.tool_calls = [*ai.tool_calls, {"name": "q", "args": {"query": "b c d"}, "id": "d"}]
    elif change == "name":
        message.name = "a rather long participant name"
    else:
        tool.tool_call_id = "call_0123456789abcdef0123456789"
    after = counter.count_message(message)
    assert after != before
    assert after == uncached_count(message)


def test_cached_counts_equal_uncached_ones_over_random_mutated_views() -> None:
    rng = random.Random(23)
    counter = TokenCounter()
    view = [_message(rng, i) for i in range(40)]
    for round_ in range(60):
        for message in rng.sample(view, rng.randint(0, 4)):
            _mutate(rng, message)
        if rng.random() < 0.3:  # the view grows, or is rebuilt from fresh (deserialized) copies
            view.append(_message(rng, 100 + round_))
        if rng.random() < 0.2:
            view = [m.model_copy(deep=True) for m in view]
        assert counter.count_messages(view) == sum(uncached_count(m) for m in view)
        assert _messages_tokens(view) == uncached_usage(view)


def test_the_memo_keeps_no_message_alive() -> None:
    memo: MessageMemo[int] = MessageMemo(lambda m: len(message_text(m)))
    view = [HumanMessage(content=f"message {i}") for i in range(10)]
    for message in view:
        memo(message)
    assert len(memo) == 10
    del view, message
    gc.collect()
    assert len(memo) == 0


def test_the_memo_starts_over_past_its_size() -> None:
    memo: MessageMemo[int] = MessageMemo(lambda m: len(message_text(m)), max_objects=8)
    view = [HumanMessage(content="x" * i) for i in range(20)]
    assert [memo(m) for m in view] == list(range(20))
    assert len(memo) <= 8
    assert [memo(m) for m in view] == list(range(20))


def test_cached_text_counts_equal_counts() -> None:
    rng = random.Random(5)
    texts = [_text(rng) for _ in range(200)]
    for text in texts + texts:
        assert count_tokens_cached(text) == count_tokens(text)


def test_a_fresh_copy_of_a_message_with_an_id_is_not_counted_again() -> None:
    """Each run reads the history from its checkpoint as new objects: equal messages of the same
    id are answered from the memo; a copy that differs in anything counted is counted again."""
    counter = CountingCounter()
    view = [_message(random.Random(11), i) for i in range(29)]
    view.append(
        AIMessage("x", tool_calls=[{"name": "q", "args": {"query": "a"}, "id": "c"}], id="ai")
    )
    first = counter.count_messages(view)
    assert counter.counted == 30
    for _ in range(3):  # three runs, each with the history deserialized afresh
        fresh = [m.model_copy(deep=True) for m in view]
        assert counter.count_messages(fresh) == first
        assert _messages_tokens(fresh) == uncached_usage(fresh)
    assert counter.counted == 30
    changed = [m.model_copy(deep=True) for m in view]
    ai = next(m for m in changed if isinstance(m, AIMessage) and m.tool_calls)
    ai.tool_calls[0]["args"]["query"] += " and a longer query than before"
    changed[0].content = "a different first message " * 3
    assert counter.count_messages(changed) == sum(uncached_count(m) for m in changed)
    assert counter.counted == 32
    # The same id under another type is another message.
    as_human = HumanMessage(content=message_text(ai), id=ai.id)
    assert counter.count_message(as_human) == uncached_count(as_human)
    assert counter.counted == 33


def test_entries_by_id_start_over_past_their_bound() -> None:
    memo: MessageMemo[int] = MessageMemo(lambda m: len(message_text(m)), max_ids=8)
    view = [HumanMessage(content="x" * i, id=f"m{i}") for i in range(20)]
    assert [memo(m) for m in view] == list(range(20))
    assert len(memo) <= 8
    assert [memo(m.model_copy()) for m in view] == list(range(20))
