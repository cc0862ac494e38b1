"""The compression algorithm's named steps, each on its own (no database, no graph).

``ContextCompressor`` chains them (tests/unit/test_summary_middleware.py drives the chain); here
each step's own rule is pinned where it is decided, and the agent-core seams of issue 18 (the
query_kb tool runs the search it is given; previews and the offline model read results with one
reader) are checked directly.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest
from langchain.tools import ToolRuntime
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from app.agents.context import AgentContext
from app.agents.tools import build_tools
from app.compression.cuts import RESERVED_SEGMENTS, SUMMARY_SEGMENTS, plan_segment
from app.compression.offload import Offloader, offload_pass
from app.compression.outcome import CompressionOutcome
from app.compression.summarizers import SummaryError, call_summarizer
from app.compression.summary_messages import build_summary_message, stacked_summary_text
from app.compression.tokens import REQUEST_TOKENS_KEY, TokenCounter, measure
from app.compression.tool_names import QUERY_KB, RECOVERY_TOOLS
from app.compression.workdir import Workdir
from app.config import WebSearchSettings
from app.offline.extractive import ExtractiveChatModel
from tests.support.summarizers import FixedSummarizer

COUNTER = TokenCounter()
SYSTEM = SystemMessage(content="You answer from the knowledge base.")


def big(tag: str, words: int = 900) -> str:
    return " ".join(f"{tag}{i}" for i in range(words))


def exchange(i: int, text: str) -> list[BaseMessage]:
    return [
        HumanMessage(content=f"question {i}", id=f"h{i}"),
        AIMessage(
            content="",
            id=f"a{i}",
            tool_calls=[{"name": "run_shell", "args": {"cmd": f"c{i}"}, "id": f"call_{i}"}],
        ),
        ToolMessage(content=text, tool_call_id=f"call_{i}", name="run_shell", id=f"t{i}"),
    ]


# --- step 1: measure ----------------------------------------------------------------------------
def test_measure_puts_the_threshold_in_our_count_by_the_providers_ratio() -> None:
    reply = AIMessage(
        content="ok",
        id="r1",
        usage_metadata={"input_tokens": 2_000, "output_tokens": 5, "total_tokens": 2_005},
        response_metadata={REQUEST_TOKENS_KEY: 1_000},
    )
    messages = [HumanMessage(content="hello there", id="h1"), reply]
    measured = measure(
        messages, counter=COUNTER, threshold=9_001, system_message=SYSTEM, tools=None
    )
    assert measured.ratio == 2.0
    # The provider counts twice ours: the same threshold is half as many of our tokens.
    assert measured.limit == math.ceil(9_001 / 2)
    assert measured.base == COUNTER.count_request(SYSTEM, None, ())
    assert measured.before == measured.base + COUNTER.count_messages(messages)
    assert measured.of(messages[:1], COUNTER) == measured.base + COUNTER.count_message(messages[0])


# --- step 2: the offload pass -------------------------------------------------------------------
def two_results() -> list[BaseMessage]:
    """A result the model was already sent (before its last reply) and a fresh one after it."""
    return [
        *exchange(0, big("old")),
        AIMessage(content="first answer", id="r0"),
        *exchange(1, big("new")),
    ]


def offloader(tmp_path: Path) -> Offloader:
    return Offloader(Workdir(tmp_path), "thread-1", COUNTER, 300, RECOVERY_TOOLS)


def test_offload_pass_shrinks_only_the_unsent_result_when_that_is_enough(tmp_path: Path) -> None:
    messages = two_results()
    total = COUNTER.count_messages(messages)
    fresh_tokens = COUNTER.count_message(messages[-1])
    # Over the threshold, but shrinking the fresh result alone gets under it.
    measured = measure(
        messages,
        counter=COUNTER,
        threshold=total - fresh_tokens // 2,
        system_message=None,
        tools=None,
    )
    result = asyncio.run(
        offload_pass(messages, measured, offloader=offloader(tmp_path), force=False)
    )
    assert [r.path for r in result.offloaded] == ["tool-results/call_1.txt"]
    # The already-sent result stays the very same message: the cached prefix is intact.
    assert result.view[2] is messages[2]
    assert result.view[-1] is not messages[-1] and "offloaded to" in result.view[-1].text
    assert not measured.over(result.view, COUNTER)


def test_forced_offload_pass_takes_every_large_result(tmp_path: Path) -> None:
    messages = two_results()
    measured = measure(messages, counter=COUNTER, threshold=10**9, system_message=None, tools=None)
    result = asyncio.run(
        offload_pass(messages, measured, offloader=offloader(tmp_path), force=True)
    )
    assert sorted(r.path for r in result.offloaded) == [
        "tool-results/call_0.txt",
        "tool-results/call_1.txt",
    ]
    assert result.failures == []


def test_offload_pass_without_a_workdir_changes_nothing() -> None:
    messages = two_results()
    measured = measure(messages, counter=COUNTER, threshold=10, system_message=None, tools=None)
    result = asyncio.run(offload_pass(messages, measured, offloader=None, force=True))
    assert result.offloaded == [] and all(
        a is b for a, b in zip(result.view, messages, strict=True)
    )


# --- step 4: summarize --------------------------------------------------------------------------
def segment(text: str) -> BaseMessage:
    return build_summary_message(text, 3, summary_tokens=COUNTER.count_text(text))


def test_plan_segment_stacks_a_new_segment_while_it_fits_then_folds_everything() -> None:
    cap = 1_200
    per_segment = cap // SUMMARY_SEGMENTS
    small = [segment("the user asked about leases")]
    stacked = plan_segment(small, counter=COUNTER, summary_max_tokens=cap)
    assert stacked.stacking and stacked.max_tokens == per_segment
    assert stacked.previous is None and stacked.kept == small

    full = [segment(big("fact", 700)), segment(big("more", 300))]
    folded = plan_segment(full, counter=COUNTER, summary_max_tokens=cap)
    assert not folded.stacking and folded.kept == []
    assert folded.max_tokens == cap - RESERVED_SEGMENTS * per_segment
    assert folded.previous == stacked_summary_text(full)

    first = plan_segment([], counter=COUNTER, summary_max_tokens=cap)
    assert not first.stacking and first.previous is None


def test_call_summarizer_refuses_an_empty_summary_and_hands_back_the_fallback() -> None:
    fallback = CompressionOutcome([HumanMessage(content="q")], 10, 10)
    with pytest.raises(SummaryError) as refused:
        asyncio.run(
            call_summarizer(
                FixedSummarizer("  \n "),
                [HumanMessage(content="q")],
                previous=None,
                max_tokens=50,
                timeout_seconds=5,
                fallback=fallback,
            )
        )
    assert refused.value.fallback is fallback


def test_call_summarizer_clips_a_verbose_summary_to_its_cap() -> None:
    text = asyncio.run(
        call_summarizer(
            FixedSummarizer(big("word", 400)),
            [HumanMessage(content="q")],
            previous=None,
            max_tokens=40,
            timeout_seconds=5,
            fallback=CompressionOutcome([], 0, 0),
        )
    )
    assert COUNTER.count_text(text) <= 40 and text.endswith("[summary truncated]")


# --- the agent core's seams ---------------------------------------------------------------------
def test_query_kb_runs_the_search_function_it_is_given(tmp_path: Path) -> None:
    calls: list[dict[str, Any]] = []
    payload = {"query": "leases", "count": 1, "results": [{"id": "7", "content": "Leases."}]}

    async def search(*, kb: str, owner_id: str, query: str, limit: int) -> dict[str, Any]:
        calls.append({"kb": kb, "owner_id": owner_id, "query": query, "limit": limit})
        return payload

    tools = {
        t.name: t
        for t in build_tools(WebSearchSettings(), search, Workdir(tmp_path), kb="handbook")
    }
    runtime = ToolRuntime(
        state={"messages": []},
        context=AgentContext(owner_id="alice", thread_id="t1"),
        config={},
        stream_writer=lambda _: None,
        tool_call_id="call_x",
        store=None,
    )
    out = asyncio.run(
        tools[QUERY_KB].ainvoke({"query": "leases", "limit": 500, "runtime": runtime})
    )
    assert json.loads(out) == payload
    # The agent's knowledge base, the thread's owner, and the limit clamped to 50.
    assert calls == [{"kb": "handbook", "owner_id": "alice", "query": "leases", "limit": 50}]


def test_the_offline_model_cites_ids_of_every_shape_the_previews_read() -> None:
    """Dify-style ``records`` (ids inside ``segment``): the preview reader always understood
    them; the offline model reads results through the same reader, so it cites them too."""
    records = {
        "query": {"content": "lease renewal"},
        "records": [
            {
                "segment": {"id": "seg-41", "content": "A lease is renewed by a heartbeat."},
                "score": 0.9,
            }
        ],
    }
    messages = [
        HumanMessage(content="How is a lease renewed?", id="h1"),
        AIMessage(
            content="",
            id="a1",
            tool_calls=[{"name": QUERY_KB, "args": {"query": "lease renewal"}, "id": "c1"}],
        ),
        ToolMessage(content=json.dumps(records), tool_call_id="c1", name=QUERY_KB, id="t1"),
    ]
    answer = ExtractiveChatModel().respond(messages).text
    assert answer.startswith("From the knowledge base:")
    assert "[kb:seg-41]" in answer
