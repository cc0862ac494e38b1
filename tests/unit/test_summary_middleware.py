"""Summary middleware: DESIGN 3 rules, the predecessor's failure modes, and a real agent graph."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.exceptions import ContextOverflowError
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from app.compression.cuts import RESERVED_SEGMENTS, SUMMARY_SEGMENTS, plan_summary
from app.compression.middleware import SummaryMiddleware
from app.compression.offload import deterministic_pass
from app.compression.overflow import is_context_overflow
from app.compression.summarizers import SummaryError
from app.compression.summary import ContextCompressor
from app.compression.summary_messages import (
    SUMMARY_HEADER,
    build_summary_message,
    is_summary_message,
    stacked_summary_text,
    summarized_count,
    summary_head,
    summary_text_of,
)
from app.compression.tokens import TokenCounter
from app.compression.workdir import INDEX_PATH, Workdir
from app.domain.errors import NothingToCompress, WorkdirUnavailable
from tests.support.summarizers import CountingSummarizer, EmptySummarizer, FailingSummarizer

COUNTER = TokenCounter()
SYSTEM = SystemMessage(content="You are a careful assistant. Cite result ids.")


def overflow_error(message: str = "This model's maximum context length is 4000 tokens") -> Any:
    """A real openai.BadRequestError as the openai client builds it for a 400 overflow."""
    response = httpx.Response(400, request=httpx.Request("POST", "http://x"))
    body = {"code": "context_length_exceeded", "message": message, "type": "invalid_request_error"}
    return openai.BadRequestError(message, response=response, body=body)  # type: ignore[arg-type]


class ScriptedChatModel(BaseChatModel):
    """Tiny agent model: calls query_kb for a new user message, answers after a tool result.

    Raises a real ``openai.BadRequestError`` (code context_length_exceeded) when the prompt is
    over ``max_prompt_tokens``, like an OpenAI-compatible endpoint would.
    """

    max_prompt_tokens: int | None = None
    use_tools: bool = True
    seen: list[list[BaseMessage]] = Field(default_factory=list)
    overflows: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted-test"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.seen.append(list(messages))
        if self.max_prompt_tokens is not None:
            size = COUNTER.count_messages(messages)
            if size > self.max_prompt_tokens:
                self.overflows += 1
                raise overflow_error(
                    f"This model's maximum context length is {self.max_prompt_tokens} tokens. "
                    f"However, your messages resulted in {size} tokens."
                )
        last = messages[-1]
        number = len(self.seen)
        if self.use_tools and isinstance(last, HumanMessage):
            reply = AIMessage(
                content="",
                tool_calls=[
                    {"name": "query_kb", "args": {"query": last.text}, "id": f"call_{number}"}
                ],
            )
        else:
            reply = AIMessage(content=f"answer {number}: see chunk-000 and chunk-049 " * 5)
        return ChatResult(generations=[ChatGeneration(message=reply)])


def kb_payload(query: str, n: int = 50, words: int = 60) -> str:
    tag = hashlib.sha1(query.encode()).hexdigest()[:6]
    return json.dumps(
        {
            "query": query,
            "count": n,
            "results": [
                {
                    "id": f"{tag}-chunk-{i:03d}",
                    "doc_id": f"doc-{i % 5}",
                    "source": f"kb/{tag}/{i}.md",
                    "title": f"Title {tag} {i}",
                    "url": f"https://kb.example.com/{tag}/{i}",
                    "score": round(1 - i / 100, 4),
                    "content": " ".join(f"w{j}" for j in range(words)),
                }
                for i in range(n)
            ],
        }
    )


# --- thread builders ----------------------------------------------------------------------------
def turn(i: int, tool_text: str, *, tool_name: str = "query_kb") -> list[BaseMessage]:
    return [
        HumanMessage(content=f"question {i}: what about topic {i}?", id=f"h{i}"),
        AIMessage(
            content="",
            id=f"a{i}",
            tool_calls=[{"name": tool_name, "args": {"query": f"topic {i}"}, "id": f"call_{i}"}],
        ),
        ToolMessage(content=tool_text, tool_call_id=f"call_{i}", name=tool_name, id=f"t{i}"),
        AIMessage(content=f"answer {i}: " + "details " * 40, id=f"r{i}"),
    ]


def thread(turns: int, tool_text: Any = None) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for i in range(turns):
        text = tool_text(i) if callable(tool_text) else (tool_text or f"small result {i}")
        messages += turn(i, text)
    messages.append(HumanMessage(content="current question: summarize what we found", id="hcur"))
    return messages


def compressor(
    tmp_path: Path,
    summarizer: Any,
    *,
    threshold: int = 6000,
    preview: int = 300,
    keep: int = 600,
    workdir: Workdir | str | None = "default",
) -> ContextCompressor:
    return ContextCompressor(
        summarizer=summarizer,
        workdir=Workdir(tmp_path) if workdir == "default" else workdir,  # type: ignore[arg-type]
        counter=COUNTER,
        summary_threshold=threshold,
        tool_result_preview_tokens=preview,
        summary_keep_recent_tokens=keep,
        summary_max_tokens=400,
        summary_timeout_seconds=5,
    )


def dumps(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    return [m.model_dump() for m in messages]


def assert_pairs_intact(messages: Sequence[BaseMessage]) -> None:
    """Every ToolMessage follows its AIMessage call and every call has its result."""
    open_calls: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        if isinstance(message, AIMessage):
            open_calls |= {str(c["id"]) for c in message.tool_calls}
        if isinstance(message, ToolMessage):
            assert message.tool_call_id in open_calls, f"orphan tool result {message.tool_call_id}"
            answered.add(message.tool_call_id)
    assert open_calls == answered


# --- pure pieces --------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_below_threshold_is_untouched_and_never_summarizes(tmp_path: Path) -> None:
    summarizer = CountingSummarizer()
    messages = thread(2)
    outcome = await compressor(tmp_path, summarizer).compress(
        messages, thread_id="t", system_message=SYSTEM, tools=[], force=False
    )
    assert not outcome.changed
    assert outcome.messages == messages and all(
        a is b for a, b in zip(outcome.messages, messages, strict=True)
    )
    assert outcome.before_tokens == outcome.after_tokens < 6000
    assert summarizer.calls == 0
    assert not (tmp_path / "t").exists()


@pytest.mark.asyncio
async def test_offload_brings_it_under_threshold_zero_summarizer_calls(tmp_path: Path) -> None:
    summarizer = CountingSummarizer()
    messages = thread(3, lambda i: kb_payload(f"topic {i}", n=20))
    comp = compressor(tmp_path, summarizer, threshold=9000)
    before = comp.count(messages, system_message=SYSTEM)
    assert before >= 9000
    outcome = await comp.compress(messages, thread_id="t", system_message=SYSTEM, force=False)
    assert summarizer.calls == 0
    assert not outcome.summarized and outcome.offloaded
    assert outcome.after_tokens < 9000 <= outcome.before_tokens == before
    for old, new in zip(messages, outcome.messages, strict=True):
        assert new.id == old.id
        if isinstance(new, ToolMessage) and new is not old:
            assert isinstance(old, ToolMessage)
            assert (new.tool_call_id, new.name) == (old.tool_call_id, old.name)
            meta = new.additional_kwargs["threadkeeper"]["offloaded"]
            path = tmp_path / "t" / meta["path"]
            assert path.read_text(encoding="utf-8") == old.content
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            assert digest == meta["sha256"]
            assert f"sha256 {digest}" in new.text
            assert f"offloaded to {meta['path']} (" in new.text
            assert "read it with read_workdir_file(path, offset=0, limit=" in new.text
    # oldest first, stopping once under the threshold: the newest result may stay verbatim
    assert outcome.offloaded[0].tool_call_id == "call_0"


@pytest.mark.asyncio
async def test_still_over_after_offload_summarizes_exactly_once(tmp_path: Path) -> None:
    summarizer = CountingSummarizer()
    messages = thread(12, lambda i: kb_payload(f"topic {i}", n=10))
    comp = compressor(tmp_path, summarizer, threshold=4000)
    outcome = await comp.compress(messages, thread_id="t", system_message=SYSTEM, force=False)
    assert summarizer.calls == 1
    assert outcome.summarized and outcome.summary_text
    assert is_summary_message(outcome.messages[0])
    assert outcome.messages[0].text.startswith(SUMMARY_HEADER)
    assert outcome.messages[0].additional_kwargs["threadkeeper"]["kind"] == "summary"
    assert outcome.messages[-1].id == "hcur"
    assert outcome.after_tokens < outcome.before_tokens
    assert_pairs_intact(outcome.messages)
    assert_pairs_intact(summarizer.inputs[0])


@pytest.mark.asyncio
async def test_tool_call_pairs_never_split(tmp_path: Path) -> None:
    # A parallel tool call with two results, then more turns: every cut point is checked.
    messages: list[BaseMessage] = [HumanMessage("start", id="h0")]
    for i in range(6):
        messages += [
            AIMessage(
                content="",
                id=f"a{i}",
                tool_calls=[
                    {"name": "lookup", "args": {"n": i}, "id": f"c{i}a"},
                    {"name": "lookup", "args": {"n": i}, "id": f"c{i}b"},
                ],
            ),
            ToolMessage("x " * 150, tool_call_id=f"c{i}a", name="lookup", id=f"t{i}a"),
            ToolMessage("y " * 150, tool_call_id=f"c{i}b", name="lookup", id=f"t{i}b"),
        ]
    messages += [AIMessage("done", id="ad"), HumanMessage("next", id="hn")]
    for keep in range(0, 3000, 50):
        cut = plan_summary(messages, counter=COUNTER, keep_recent_tokens=keep)
        assert_pairs_intact(messages[cut:])
        assert_pairs_intact(messages[:cut]) if cut else None
        assert cut <= len(messages) - 1  # the current user turn is kept
    # and the agent's in-flight turn (no new human message) is never cut
    in_flight = [
        *messages[:-1],
        HumanMessage("go", id="hg"),
        AIMessage("", id="ag", tool_calls=[{"name": "lookup", "args": {}, "id": "cg"}]),
        ToolMessage("z " * 2000, tool_call_id="cg", name="lookup", id="tg"),
    ]
    cut = plan_summary(in_flight, counter=COUNTER, keep_recent_tokens=0)
    assert in_flight[cut].id == "hg"


@pytest.mark.asyncio
async def test_current_user_turn_survives_single_oversized_last_message(tmp_path: Path) -> None:
    summarizer = CountingSummarizer()
    huge = HumanMessage(content="Please review this log:\n" + "ERROR disk full\n" * 4000, id="big")
    messages = [*thread(3)[:-1], huge]
    comp = compressor(tmp_path, summarizer, threshold=5000)
    outcome = await comp.compress(messages, thread_id="t", system_message=SYSTEM, force=False)
    assert summarizer.calls == 1
    assert outcome.messages[-1] is huge
    assert outcome.messages[-1].content == huge.content
    assert all(m.id != "big" for m in summarizer.inputs[0])
    # the oversized turn alone: nothing to summarize -> automatic path sends it, manual refuses
    alone = [HumanMessage(content=huge.content, id="solo")]
    auto = await comp.compress(alone, thread_id="t", system_message=SYSTEM, force=False)
    assert auto.messages == alone and not auto.changed
    with pytest.raises(NothingToCompress):
        await comp.compress(alone, thread_id="t", system_message=SYSTEM, force=True)
    assert summarizer.calls == 1


@pytest.mark.asyncio
async def test_summarizer_failure_is_never_stored_as_summary(tmp_path: Path) -> None:
    messages = thread(12, lambda i: kb_payload(f"topic {i}", n=10))
    for summarizer in (FailingSummarizer(), EmptySummarizer()):
        comp = compressor(tmp_path, summarizer, threshold=4000)
        with pytest.raises(SummaryError) as info:
            await comp.compress(messages, thread_id="t", system_message=SYSTEM, force=False)
        assert summarizer.calls == 1
        assert FailingSummarizer.SECRET not in str(info.value)
        fallback = info.value.fallback
        assert fallback is not None and not fallback.summarized
        assert not any(is_summary_message(m) for m in fallback.messages)
        assert all(FailingSummarizer.SECRET not in m.text for m in fallback.messages)


@pytest.mark.asyncio
async def test_input_messages_are_not_mutated(tmp_path: Path) -> None:
    messages = thread(12, lambda i: kb_payload(f"topic {i}", n=10))
    snapshot = dumps(messages)
    comp = compressor(tmp_path, CountingSummarizer(), threshold=4000)
    outcome = await comp.compress(messages, thread_id="t", system_message=SYSTEM, force=True)
    assert outcome.summarized and outcome.offloaded
    assert dumps(messages) == snapshot


@pytest.mark.asyncio
@pytest.mark.parametrize("failure", ["missing_root", "root_is_file", "target_is_dir", "read_only"])
async def test_workdir_failure_leaves_message_unchanged(tmp_path: Path, failure: str) -> None:
    root = tmp_path / "wd"
    if failure == "root_is_file":
        root.write_text("file")
    elif failure == "target_is_dir":
        (root / "t" / "tool-results" / "call_0.txt").mkdir(parents=True)
    elif failure == "read_only":
        root = Path("/proc")  # refuses new entries even to root
    messages = thread(1, kb_payload("topic 0", n=30))
    failures: list[str] = []
    view, offloaded = await deterministic_pass(
        messages,
        thread_id="t",
        workdir=Workdir(root),
        counter=COUNTER,
        preview_tokens=300,
        failures=failures,
    )
    assert offloaded == []
    assert all(a is b for a, b in zip(view, messages, strict=True))
    if failure == "missing_root":
        assert not root.exists()
    # Each failed write is reported with a reason that names no path.
    assert len(failures) == 1 and str(root) not in failures[0]
    expected = {
        "missing_root": "workdir root missing",
        "root_is_file": "workdir root missing",
        "target_is_dir": "EISDIR",
        "read_only": "ENOENT",
    }[failure]
    assert failures[0].startswith(expected), failures


@pytest.mark.asyncio
async def test_manual_path_refuses_when_the_workdir_fails_before_summarizing(
    tmp_path: Path,
) -> None:
    """Offloading was needed and failed: the manual path stops (WorkdirUnavailable) before the
    summarizer is called, so nothing is shrunk; the automatic path still summarizes, saying why
    the results stayed verbatim."""
    messages = thread(4, lambda i: kb_payload(f"topic {i}", n=30))
    summarizer = CountingSummarizer()
    comp = compressor(tmp_path, summarizer, threshold=4000, workdir=Workdir(Path("/proc")))
    with pytest.raises(WorkdirUnavailable) as refused:
        await comp.compress(
            messages, thread_id="t", system_message=SYSTEM, force=True, require_offload=True
        )
    assert refused.value.failed == 4 and summarizer.calls == 0

    outcome = await comp.compress(messages, thread_id="t", system_message=SYSTEM)
    assert outcome.summarized and summarizer.calls == 1
    assert len(outcome.offload_failures) >= 1
    meta = outcome.messages[0].additional_kwargs["threadkeeper"]
    assert meta["offload_failed"] == {
        "count": len(outcome.offload_failures),
        "reason": outcome.offload_failures[0],
    }


@pytest.mark.asyncio
async def test_no_workdir_or_thread_skips_offload(tmp_path: Path) -> None:
    messages = thread(3, lambda i: kb_payload(f"topic {i}", n=20))
    summarizer = CountingSummarizer()
    comp = compressor(tmp_path, summarizer, threshold=9000, workdir=None)
    outcome = await comp.compress(messages, thread_id="t", system_message=SYSTEM)
    assert outcome.offloaded == [] and summarizer.calls == 1


async def test_pass_skips_recovery_tool_and_already_offloaded(tmp_path: Path) -> None:
    workdir = Workdir(tmp_path)
    messages = thread(2, lambda i: kb_payload(f"topic {i}", n=30))
    messages += turn(9, "file text " * 2000, tool_name="read_workdir_file")
    view, offloaded = await deterministic_pass(
        messages, thread_id="t", workdir=workdir, counter=COUNTER, preview_tokens=300
    )
    assert [r.tool_call_id for r in offloaded] == ["call_0", "call_1"]
    recovery = next(m for m in view if m.id == "t9")
    assert recovery is messages[-2]
    again, offloaded_again = await deterministic_pass(
        view, thread_id="t", workdir=workdir, counter=COUNTER, preview_tokens=300
    )
    assert offloaded_again == []
    assert all(a is b for a, b in zip(again, view, strict=True))


@pytest.mark.asyncio
async def test_every_id_url_title_score_of_50_results_survives(tmp_path: Path) -> None:
    payload = kb_payload("retention", n=50, words=150)
    messages = thread(1, payload)
    summarizer = CountingSummarizer()
    comp = compressor(tmp_path, summarizer, threshold=4000)
    outcome = await comp.compress(messages, thread_id="t", system_message=SYSTEM)
    assert summarizer.calls == 0
    visible = "\n".join(m.text for m in outcome.messages)
    assert outcome.offloaded and outcome.after_tokens < outcome.before_tokens / 2
    assert "one result per line: id doc_id score | source | title | url" in visible
    for result in json.loads(payload)["results"]:
        assert (
            f"\n{result['id']} {result['doc_id']} {json.dumps(result['score'])} | "
            f"{result['source']} | {result['title']} | {result['url']}"
        ) in visible


@pytest.mark.asyncio
async def test_next_summary_is_stacked_after_the_existing_one(tmp_path: Path) -> None:
    """Cache-aware: the summary the view starts with stays an unchanged prefix; the new one
    (of the newly summarized messages only) follows it, each within its share of the budget."""
    summarizer = CountingSummarizer()
    comp = compressor(tmp_path, summarizer, threshold=4000)
    messages = thread(12, lambda i: kb_payload(f"topic {i}", n=10))
    first = await comp.compress(messages, thread_id="t", system_message=SYSTEM)
    assert summarizer.previous[0] is None
    segment_max = 400 // SUMMARY_SEGMENTS  # the compressor's summary_max_tokens, shared
    # a first summary leaves room for RESERVED_SEGMENTS segments
    assert COUNTER.count_text(first.summary_text or "") <= 400 - RESERVED_SEGMENTS * segment_max
    grown = [*first.messages[:-1], *thread(12, lambda i: kb_payload(f"more {i}", n=10))[4:]]
    second = await comp.compress(grown, thread_id="t", system_message=SYSTEM)
    assert summarizer.calls == 2 and second.summarized
    assert summarizer.previous[1] is None  # a segment: nothing folded in
    assert all(not is_summary_message(m) for m in summarizer.inputs[1])
    # the first summary message is untouched (same id, same text): the request prefix survives
    assert second.messages[0] is first.messages[0]
    assert summary_head(second.messages) == 2
    assert sum(is_summary_message(m) for m in second.messages) == 2
    assert COUNTER.count_text(second.summary_text or "") <= segment_max
    assert second.messages[1].text.endswith(second.summary_text or "")
    meta = second.messages[1].additional_kwargs["threadkeeper"]
    assert meta["summarized_messages"] == first.summarized_messages + second.summarized_messages
    # one pointer to the index is enough: the new segment does not repeat it
    assert INDEX_PATH in second.messages[0].text and INDEX_PATH not in second.messages[1].text
    assert summarized_count(second.messages) == meta["summarized_messages"]
    assert stacked_summary_text(second.messages) == (
        f"{summary_text_of(second.messages[0])}\n\n{second.summary_text}"
    )


@pytest.mark.asyncio
async def test_stacked_summaries_fold_into_one_when_the_budget_is_used_up(tmp_path: Path) -> None:
    summarizer = CountingSummarizer()
    comp = compressor(tmp_path, summarizer, threshold=4000)
    segment_max = 400 // SUMMARY_SEGMENTS
    view = thread(12, lambda i: kb_payload(f"topic {i}", n=10))
    heads: list[int] = []
    for round_ in range(RESERVED_SEGMENTS + 3):
        outcome = await comp.compress(view, thread_id="t", system_message=SYSTEM)
        assert outcome.summarized
        heads.append(summary_head(outcome.messages))
        stack = outcome.messages[: heads[-1]]
        # the segments together never exceed summary_max_tokens
        assert sum(COUNTER.count_text(summary_text_of(m)) for m in stack) <= 400
        assert all(COUNTER.count_text(summary_text_of(m)) <= segment_max for m in stack[1:])
        more = thread(12, lambda i, r=round_: kb_payload(f"round {r} {i}", n=10))[4:]
        view = [*outcome.messages[:-1], *more]
    folds = [i for i in range(1, len(heads)) if heads[i] <= heads[i - 1]]
    assert heads[:3] == [1, 2, 3] and folds, heads  # two segments fit after the first
    fold = folds[0]
    assert heads[fold] == 1  # everything folded into one segment ...
    # ... with the earlier segments' text handed to the summarizer, in order
    assert summarizer.previous[fold] is not None
    assert summarizer.previous[fold].startswith("summary #1 of")


@pytest.mark.asyncio
async def test_manual_path_forces_and_refuses_short_history(tmp_path: Path) -> None:
    summarizer = CountingSummarizer()
    comp = compressor(tmp_path, summarizer, threshold=100_000)
    short = [HumanMessage("hi", id="h")]
    with pytest.raises(NothingToCompress):
        await comp.compress(short, thread_id="t", force=True)
    messages = thread(4, lambda i: kb_payload(f"topic {i}", n=10))
    outcome = await comp.compress(messages, thread_id="t", force=True)
    assert outcome.summarized and len(outcome.offloaded) == 4 and summarizer.calls == 1


def test_build_summary_message_is_marked() -> None:
    message = build_summary_message("the gist", 7, previous_summarized=3)
    assert message.name == "context_summary"
    assert message.text.splitlines()[0] == SUMMARY_HEADER
    assert message.additional_kwargs["threadkeeper"]["summarized_messages"] == 10
    assert message.id and is_summary_message(message)


def test_is_context_overflow() -> None:
    error = overflow_error()
    assert error.code == "context_length_exceeded"
    assert is_context_overflow(error)
    # body passed the way the brief suggested (wrapped in "error"): .code is None, still detected
    wrapped_body = openai.BadRequestError(
        "bad request",
        response=httpx.Response(400, request=httpx.Request("POST", "http://x")),  # type: ignore[arg-type]
        body={"error": {"code": "context_length_exceeded", "message": "too long"}},
    )
    assert wrapped_body.code is None and is_context_overflow(wrapped_body)
    assert is_context_overflow(ContextOverflowError("too big"))
    anthropic_like = openai.BadRequestError(
        "prompt is too long: 210000 tokens > 200000 maximum",
        response=httpx.Response(400, request=httpx.Request("POST", "http://x")),  # type: ignore[arg-type]
        body=None,
    )
    assert is_context_overflow(anthropic_like)
    try:
        try:
            raise overflow_error()
        except openai.BadRequestError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert is_context_overflow(outer)
    assert not is_context_overflow(ValueError("maximum context length mentioned in passing"))
    other = openai.BadRequestError(
        "invalid tool schema",
        response=httpx.Response(400, request=httpx.Request("POST", "http://x")),  # type: ignore[arg-type]
        body={"code": "invalid_value"},
    )
    assert not is_context_overflow(other)


# --- through a real create_agent graph ----------------------------------------------------------
@tool
def query_kb(query: str) -> str:
    """Search the knowledge base."""
    return kb_payload(query, n=50, words=60)


def agent(model: ScriptedChatModel, comp: ContextCompressor) -> Any:
    return create_agent(
        model=model,
        tools=[query_kb],
        system_prompt=SYSTEM.text,
        middleware=[SummaryMiddleware(comp)],
        checkpointer=InMemorySaver(),
    )


async def run_turn(graph: Any, text: str, thread_id: str) -> list[dict[str, Any]]:
    config = {"configurable": {"thread_id": thread_id}}
    events: list[dict[str, Any]] = []
    async for mode, chunk in graph.astream(
        {"messages": [HumanMessage(text)]}, config, stream_mode=["custom", "updates"]
    ):
        if mode == "custom":
            events.append(chunk)
    return events


@pytest.mark.asyncio
async def test_agent_offload_persists_in_checkpoint_and_next_call_sees_it(tmp_path: Path) -> None:
    summarizer = CountingSummarizer()
    comp = compressor(tmp_path, summarizer, threshold=6000, preview=300, keep=800)
    model = ScriptedChatModel()
    graph = agent(model, comp)
    config = {"configurable": {"thread_id": "thread-a"}}
    events = await run_turn(graph, "what is the retention policy?", "thread-a")
    assert summarizer.calls == 0
    assert [e["reason"] for e in events] == ["threshold"]
    assert events[0]["offloaded"] == 1 and not events[0]["summarized"]
    state = await graph.aget_state(config)
    tool_messages = [m for m in state.values["messages"] if isinstance(m, ToolMessage)]
    assert len(tool_messages) == 1
    stored = tool_messages[0]
    assert stored.additional_kwargs["threadkeeper"]["offloaded"]["path"] == (
        f"tool-results/{stored.tool_call_id}.txt"
    )
    full = (tmp_path / "thread-a" / "tool-results" / f"{stored.tool_call_id}.txt").read_text()
    assert full == query_kb.invoke({"query": "what is the retention policy?"})
    # the second model call of turn 1 already saw the preview, not the full JSON
    assert model.seen[1][-1].text == stored.text
    assert len(state.values["messages"]) == 4  # human, ai(tool call), tool, ai: no duplicates
    await run_turn(graph, "and the deletion policy?", "thread-a")
    third_call = model.seen[2]
    assert any(m.text == stored.text for m in third_call)
    assert all(len(m.text) < 20_000 for m in third_call)


@pytest.mark.asyncio
async def test_agent_summary_persists_and_next_call_starts_with_it(tmp_path: Path) -> None:
    summarizer = CountingSummarizer()
    comp = compressor(tmp_path, summarizer, threshold=5000, preview=300, keep=400)
    model = ScriptedChatModel()
    graph = agent(model, comp)
    config = {"configurable": {"thread_id": "thread-s"}}
    all_events: list[dict[str, Any]] = []
    for i in range(5):
        all_events += await run_turn(graph, f"question {i} about topic {i}", "thread-s")
    assert summarizer.calls >= 1
    assert any(e["summarized"] for e in all_events)
    state = await graph.aget_state(config)
    messages = state.values["messages"]
    assert is_summary_message(messages[0])
    # summary segments only at the head of the view
    head = summary_head(messages)
    assert sum(is_summary_message(m) for m in messages) == head >= 1
    assert len({m.id for m in messages}) == len(messages)
    assert_pairs_intact(messages)
    assert isinstance(messages[-1], AIMessage) and not messages[-1].tool_calls
    calls_before = len(model.seen)
    await run_turn(graph, "final question", "thread-s")
    next_call = model.seen[calls_before]
    assert isinstance(next_call[0], SystemMessage)
    assert is_summary_message(next_call[1])
    assert COUNTER.count_messages(next_call) < 5000


@pytest.mark.asyncio
async def test_agent_overflow_summarizes_and_retries_once(tmp_path: Path) -> None:
    summarizer = CountingSummarizer()
    # threshold far away: only the provider's overflow can trigger compression
    comp = compressor(tmp_path, summarizer, threshold=1_000_000, preview=2000, keep=100)
    model = ScriptedChatModel(max_prompt_tokens=650, use_tools=False)
    graph = agent(model, comp)
    config = {"configurable": {"thread_id": "thread-o"}}
    for i in range(3):
        await run_turn(graph, f"tell me about subject {i} " + "context " * 80, "thread-o")
    assert model.overflows == 0
    events = await run_turn(graph, "one more " + "context " * 250, "thread-o")
    assert model.overflows == 1
    assert summarizer.calls == 1
    assert [e["reason"] for e in events] == ["overflow"]
    assert events[0]["summarized"] and events[0]["after_tokens"] < events[0]["before_tokens"]
    failed, retried = model.seen[-2], model.seen[-1]
    assert COUNTER.count_messages(retried) < COUNTER.count_messages(failed)
    assert is_summary_message(retried[1])
    assert retried[-1].text.startswith("one more")
    state = await graph.aget_state(config)
    assert is_summary_message(state.values["messages"][0])
    assert state.next == ()


@pytest.mark.asyncio
async def test_agent_overflow_that_cannot_shrink_reraises(tmp_path: Path) -> None:
    summarizer = CountingSummarizer()
    comp = compressor(tmp_path, summarizer, threshold=1_000_000)
    model = ScriptedChatModel(max_prompt_tokens=50, use_tools=False)
    graph = agent(model, comp)
    with pytest.raises(openai.BadRequestError) as info:
        await run_turn(graph, "a single long question " * 30, "thread-x")
    assert info.value.code == "context_length_exceeded"
    assert summarizer.calls == 0 and model.overflows == 1


@pytest.mark.asyncio
async def test_agent_summarizer_failure_sends_offloaded_view(tmp_path: Path) -> None:
    summarizer = FailingSummarizer()
    comp = compressor(tmp_path, summarizer, threshold=3000, preview=300, keep=400)
    model = ScriptedChatModel()
    graph = agent(model, comp)
    for i in range(3):
        await run_turn(graph, f"question {i}", "thread-f")
    assert summarizer.calls >= 1
    state = await graph.aget_state({"configurable": {"thread_id": "thread-f"}})
    messages = state.values["messages"]
    assert not any(is_summary_message(m) for m in messages)
    assert all(FailingSummarizer.SECRET not in m.text for m in messages)
    assert all(
        "offloaded" in m.additional_kwargs.get("threadkeeper", {})
        for m in messages
        if isinstance(m, ToolMessage)
    )
    assert not re.search("exploded", "\n".join(m.text for m in model.seen[-1]))


@pytest.mark.asyncio
async def test_summary_names_the_index_of_every_original_with_no_cap(tmp_path: Path) -> None:
    summarizer = CountingSummarizer()
    comp = compressor(tmp_path, summarizer, threshold=4000)
    # 40 large results plus small ones: more than the old 25-file list could name.
    messages = thread(40, lambda i: kb_payload(f"topic {i}", n=10) if i % 4 else f"tiny {i}")
    first = await comp.compress(messages, thread_id="t", system_message=SYSTEM)
    summary = first.messages[0]
    assert is_summary_message(summary)
    assert INDEX_PATH in summary.text and "search_workdir" in summary.text
    index = await Workdir(tmp_path).read_index("t")
    indexed = {e["tool_call_id"] for e in index}
    kept_calls = {m.tool_call_id for m in first.messages if isinstance(m, ToolMessage)}
    summarized_calls = {f"call_{i}" for i in range(40)} - kept_calls
    assert len(summarized_calls) > 25
    # every summarized-away original is indexed, small ones included, each exactly once
    assert summarized_calls <= indexed and len(indexed) == len(index)
    assert f"all {len(index)} full originals" in summary.text
    for entry in index:
        original = next(
            m
            for m in messages
            if isinstance(m, ToolMessage) and m.tool_call_id == entry["tool_call_id"]
        )
        stored = (tmp_path / "t" / str(entry["path"])).read_text(encoding="utf-8")
        assert stored == original.text
        assert entry["sha256"] == hashlib.sha256(stored.encode()).hexdigest()
        assert entry["tool"] == "query_kb" and entry["args"] == {
            "query": f"topic {original.tool_call_id[5:]}"
        }
        if original.text.startswith("{"):
            payload = json.loads(original.text)
            assert entry["ids"][0] == payload["results"][0]["id"]
            assert entry["urls"] == [r["url"] for r in payload["results"]]
            assert entry["titles"] == [r["title"] for r in payload["results"]]
    grown = [*first.messages[:-1], *thread(12, lambda i: kb_payload(f"more {i}", n=10))[4:]]
    second = await comp.compress(grown, thread_id="t", system_message=SYSTEM)
    assert second.summarized
    # the new segment follows the first summary, which still names the index (once in all)
    assert second.messages[0] is first.messages[0]
    assert summarizer.previous[1] is None
    assert sum(m.text.count(INDEX_PATH) for m in second.messages) == 1


def with_new_result(messages: list[BaseMessage], text: str) -> list[BaseMessage]:
    """The request after the model called query_kb for the current question."""
    return [
        *messages,
        AIMessage(
            content="", id="anew", tool_calls=[{"name": "query_kb", "args": {}, "id": "call_new"}]
        ),
        ToolMessage(content=text, tool_call_id="call_new", name="query_kb", id="tnew"),
    ]


@pytest.mark.asyncio
async def test_crossing_at_a_new_result_shrinks_only_that_result(tmp_path: Path) -> None:
    """The previous request stays an unchanged prefix: older (cached) results stay verbatim."""
    summarizer = CountingSummarizer()
    earlier = thread(2, lambda i: kb_payload(f"topic {i}", n=10))
    request = with_new_result(earlier, kb_payload("fresh", n=20))
    previous_size = COUNTER.count_request(SYSTEM, None, earlier)
    comp = compressor(tmp_path, summarizer, threshold=previous_size + 1800)
    outcome = await comp.compress(request, thread_id="t", system_message=SYSTEM)
    assert outcome.changed and not outcome.summarized and summarizer.calls == 0
    assert [m.id for m in outcome.replaced] == ["tnew"]
    assert outcome.messages[: len(earlier) + 1] == request[: len(earlier) + 1]
    assert outcome.before_tokens >= previous_size + 1800 > outcome.after_tokens


@pytest.mark.asyncio
async def test_a_needed_rewrite_offloads_every_large_result_at_once(tmp_path: Path) -> None:
    summarizer = CountingSummarizer()
    messages = thread(4, lambda i: kb_payload(f"topic {i}", n=10))
    comp = compressor(
        tmp_path, summarizer, threshold=COUNTER.count_request(SYSTEM, None, messages) - 50
    )
    outcome = await comp.compress(messages, thread_id="t", system_message=SYSTEM)
    assert not outcome.summarized
    # one step frees room for several turns instead of just enough for this request
    assert sorted(r.tool_call_id for r in outcome.offloaded) == [f"call_{i}" for i in range(4)]


@pytest.mark.asyncio
async def test_once_compacted_new_results_arrive_as_previews_below_the_threshold(
    tmp_path: Path,
) -> None:
    summarizer = CountingSummarizer()
    comp = compressor(tmp_path, summarizer, threshold=20_000)
    compacted, _ = await deterministic_pass(
        thread(2, lambda i: kb_payload(f"topic {i}", n=10)),
        thread_id="t",
        workdir=Workdir(tmp_path),
        counter=COUNTER,
        preview_tokens=300,
    )
    request = with_new_result(compacted, kb_payload("fresh", n=10))
    assert comp.count(request, system_message=SYSTEM) < 20_000
    outcome = await comp.compress(request, thread_id="t", system_message=SYSTEM)
    assert [m.id for m in outcome.replaced] == ["tnew"]
    assert outcome.messages[:-1] == request[:-1]  # append-only: the cached prefix is untouched
    # a thread never compacted keeps a new result verbatim below the threshold
    fresh = with_new_result(thread(2), kb_payload("fresh", n=10))
    untouched = await comp.compress(fresh, thread_id="t2", system_message=SYSTEM)
    assert not untouched.changed
