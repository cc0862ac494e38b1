"""Counts follow the provider's own measure once a reply reported usage for a request we counted."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from app.compression.summary import ContextCompressor
from app.compression.tokens import (
    REQUEST_TOKENS_KEY,
    TokenCounter,
    provider_ratio,
    stamp_request_tokens,
)
from app.compression.workdir import Workdir
from tests.support.summarizers import CountingSummarizer, SlowChunkedSummarizer

COUNTER = TokenCounter()


def reply(ours: int | None, theirs: int, model: str = "gpt-x") -> AIMessage:
    meta: dict[str, object] = {"model_name": model}
    if ours is not None:
        meta[REQUEST_TOKENS_KEY] = ours
    return AIMessage(
        "answer",
        response_metadata=meta,
        usage_metadata={"input_tokens": theirs, "output_tokens": 1, "total_tokens": theirs + 1},
    )


def test_ratio_comes_from_the_latest_stamped_reply_and_is_bounded() -> None:
    assert provider_ratio([HumanMessage("hi")]) == 1.0
    assert provider_ratio([reply(None, 500)]) == 1.0  # usage without our count: unknown
    assert provider_ratio([reply(100, 150), HumanMessage("x"), reply(200, 100)]) == 0.5
    assert provider_ratio([reply(100, 150), reply(None, 100)]) == 1.0  # only the latest counts
    assert provider_ratio([reply(100, 130)]) == pytest.approx(1.3)
    assert provider_ratio([reply(100, 1000)]) == 2.0  # clamped
    assert provider_ratio([reply(1000, 1)]) == 0.5


def test_stamp_skips_the_offline_model_and_replies_without_usage() -> None:
    real, offline, bare = reply(None, 10), reply(None, 10, model="extractive"), AIMessage("x")
    stamp_request_tokens([real, offline, bare], 42)
    assert real.response_metadata[REQUEST_TOKENS_KEY] == 42
    assert REQUEST_TOKENS_KEY not in offline.response_metadata
    assert REQUEST_TOKENS_KEY not in bare.response_metadata


def history(turns: int) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i in range(turns):
        out += [
            HumanMessage(f"question {i} " + "lorem ipsum " * 40),
            AIMessage(f"answer {i} " + "dolor " * 40),
        ]
    return out


async def test_a_provider_that_counts_more_triggers_compression_earlier(tmp_path: Path) -> None:
    messages = history(6)
    raw = COUNTER.count_request(None, None, messages)
    threshold = raw + 50  # below the threshold in our own measure...
    plain = CountingSummarizer(terse=True)
    comp = ContextCompressor(
        summarizer=plain,
        workdir=Workdir(tmp_path),
        counter=COUNTER,
        summary_threshold=threshold,
        summary_keep_recent_tokens=100,
        summary_max_tokens=100,
    )
    unchanged = await comp.compress(messages, thread_id="t")
    assert plain.calls == 0 and unchanged.before_tokens == raw

    # ...but the provider reported 1.5x our count for the last request: now it is over.
    calibrated = [*messages[:-1], reply(1000, 1500)]
    raw2 = COUNTER.count_request(None, None, calibrated)
    assert comp.count(calibrated) == round(raw2 * 1.5)
    outcome = await comp.compress(calibrated, thread_id="t")
    assert plain.calls == 1 and outcome.summarized
    assert outcome.before_tokens == round(raw2 * 1.5)
    assert outcome.after_tokens < threshold


async def test_the_ratio_survives_a_summary_that_removed_every_reply(tmp_path: Path) -> None:
    messages = [*history(6)[:-1], reply(1000, 1500), HumanMessage("new question")]
    comp = ContextCompressor(
        summarizer=CountingSummarizer(terse=True),
        workdir=Workdir(tmp_path),
        counter=COUNTER,
        summary_threshold=400,
        summary_keep_recent_tokens=10,
        summary_max_tokens=100,
    )
    outcome = await comp.compress(messages, thread_id="t", force=True)
    assert outcome.summarized
    assert not any(isinstance(m, AIMessage) for m in outcome.messages)  # every reply is gone
    assert provider_ratio(outcome.messages) == pytest.approx(1.5)


async def test_a_self_bounded_summarizer_is_not_cut_off_as_a_whole(tmp_path: Path) -> None:
    comp = ContextCompressor(
        summarizer=SlowChunkedSummarizer(),
        workdir=Workdir(tmp_path),
        counter=COUNTER,
        summary_threshold=400,
        summary_keep_recent_tokens=10,
        summary_max_tokens=100,
        summary_timeout_seconds=0.3,  # shorter than the three chunks together
    )
    outcome = await comp.compress(history(4), thread_id="t", force=True)
    assert outcome.summarized and outcome.summary_text == "summary"
