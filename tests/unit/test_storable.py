"""The one sanitizer for text we store, and the tool-call guard at the model boundary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from app.agents.graph import build_agent_runtime
from app.agents.middlewares.boundary import RESULT_UNKNOWN, answer_tool_calls
from app.agents.models import build_chat_model
from app.compression.storable import storable_message, storable_text, storable_value
from app.compression.summarizers import LLMSummarizer
from app.compression.summary import ContextCompressor
from app.compression.workdir import Workdir, open_workdir
from app.config import load_settings
from app.offline.summarizer import ExtractiveSummarizer
from tests.conftest import make_settings
from tests.support.openai_server import OpenAICompatibleServer

CUT = "\ud83d"  # the high half of an emoji, as json.loads returns '"\\ud83d"'


def test_storable_text_drops_nul_and_replaces_each_surrogate() -> None:
    assert storable_text("clean Zürich 😀") == "clean Zürich 😀"
    assert storable_text(f"a\x00b{CUT}c\udc00") == "ab\ufffdc\ufffd"
    text = storable_text(json.loads('"cut \\ud83d"'))
    assert text == "cut \ufffd"
    text.encode("utf-8")  # what asyncpg does with it: no "surrogates not allowed"
    value = storable_value({f"k{CUT}": [f"v{CUT}", 1, None, {"n": "\x00"}]})
    assert value == {"k\ufffd": ["v\ufffd", 1, None, {"n": ""}]}


def test_storable_message_cleans_every_text_field_and_keeps_the_rest() -> None:
    clean = AIMessage(content="fine", id="ai-1")
    assert storable_message(clean) is clean
    dirty = AIMessage(
        content=f"answer {CUT}",
        id="ai-2",
        tool_calls=[{"id": "c1", "name": "query_kb", "args": {"query": f"q{CUT}"}}],
        response_metadata={"finish_reason": "stop"},
    )
    fixed = storable_message(dirty)
    assert fixed.id == "ai-2" and fixed.content == "answer \ufffd"
    assert fixed.tool_calls[0]["args"] == {"query": "q\ufffd"}
    assert dirty.content == f"answer {CUT}"  # a copy: the original is not mutated
    tool = storable_message(ToolMessage(content=f"r{CUT}", tool_call_id="c1", status="error"))
    assert tool.content == "r\ufffd" and tool.tool_call_id == "c1" and tool.status == "error"


async def test_workdir_stores_a_cut_emoji_as_replacement_character(
    workdir_settings: dict[str, Any], tmp_path: Path
) -> None:
    """Encoding a lone surrogate as UTF-8 raised UnicodeEncodeError: the offload failed."""
    workdir = open_workdir(make_settings("", tmp_path / "workdir", **workdir_settings).workdir)
    record = await workdir.write_tool_result("thread-1", "call_1", f"cut {CUT} here")
    text, total, _ = await workdir.read_text("thread-1", record.path, offset=0, limit=100)
    assert text == "cut \ufffd here" and total == record.chars == len(text)


def _ai(*ids: str) -> AIMessage:
    return AIMessage(
        content="", tool_calls=[{"id": i, "name": "query_kb", "args": {}} for i in ids]
    )


def test_answer_tool_calls_adds_a_result_for_each_unanswered_call_only() -> None:
    answered = [HumanMessage("q"), _ai("a"), ToolMessage("r", tool_call_id="a")]
    same, added = answer_tool_calls(answered)
    assert same == answered and added == []

    history = [
        HumanMessage("q"),
        _ai("a", "b"),
        ToolMessage("r", tool_call_id="a"),
        HumanMessage("next"),
        _ai("c"),
    ]
    fixed, added = answer_tool_calls(history)
    assert added == ["b", "c"]
    assert [type(m).__name__ for m in fixed] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "ToolMessage",
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
    ]
    assert [m.tool_call_id for m in fixed if isinstance(m, ToolMessage)] == ["a", "b", "c"]
    assert fixed[3].content == RESULT_UNKNOWN and "may have run" in RESULT_UNKNOWN


async def test_the_agent_never_sends_a_tool_call_without_its_result(tmp_path: Path) -> None:
    """Whatever the state holds, the request leaves with every call answered (the local
    provider, like a real one, answers 400 otherwise); the reply is storable in the state."""
    with OpenAICompatibleServer() as llm:
        rt = build_agent_runtime(
            model=build_chat_model(
                load_settings({}, llm_base_url=llm.base_url, llm_api_key="k").models
            ),
            tools=[],
            compressor=ContextCompressor(
                summarizer=ExtractiveSummarizer(), workdir=Workdir(tmp_path)
            ),
            system_prompt="You answer.",
            checkpointer=InMemorySaver(),
        )
        cfg = rt.config_for("t1")
        dangling = [HumanMessage("q", id="h1"), _ai("call_lost")]
        await rt.graph.aupdate_state(cfg, {"messages": dangling}, as_node="model")
        llm.enqueue_text(f"answer {CUT}")
        await rt.graph.ainvoke({"messages": [HumanMessage("again?", id="h2")]}, cfg)
        [request] = llm.requests
        assert [m["role"] for m in request["messages"]] == [
            "system",
            "user",
            "assistant",
            "tool",
            "user",
        ]
        assert request["messages"][3] == {
            "role": "tool",
            "content": RESULT_UNKNOWN,
            "tool_call_id": "call_lost",
        }
        state = await rt.graph.aget_state(cfg)
        assert state.values["messages"][-1].content == "answer \ufffd"


async def test_a_summary_from_the_provider_is_storable() -> None:
    """The summary goes into the checkpoint (which would silently make it "?") and events."""
    with OpenAICompatibleServer() as llm:
        chat = build_chat_model(
            load_settings({}, llm_base_url=llm.base_url, llm_api_key="k").models
        )
        llm.enqueue_text(f"The user asked about leases {CUT}")
        summary = await LLMSummarizer(chat).asummarize(
            [HumanMessage("leases?"), AIMessage("30 s")], previous_summary=None, max_tokens=200
        )
        assert summary == "The user asked about leases \ufffd"
