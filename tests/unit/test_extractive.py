"""The offline extractive model and summarizer, through a real ``create_agent`` graph."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.runtime import Runtime

from app.compression.tokens import count_tokens, truncate_to_tokens
from app.offline.extractive import DELTA_CHARS, ExtractiveChatModel, text_pieces
from app.offline.summarizer import ExtractiveSummarizer

DOCS: list[dict[str, Any]] = [
    {
        "id": "c-lease-1",
        "doc_id": "d-worker",
        "source": "kb",
        "title": "Worker leases",
        "url": "https://docs.example.test/worker#lease",
        "score": 0.91,
        "content": (
            "Workers claim queued requests with SKIP LOCKED. "
            "A run lease expires after 30 seconds unless the worker sends a heartbeat. "
            "Expired leases are recovered by marking the run failed."
        ),
    },
    {
        "id": "c-sse-2",
        "doc_id": "d-events",
        "source": "kb",
        "title": "Events",
        "url": "https://docs.example.test/events",
        "score": 0.42,
        "content": "Run events are streamed to clients as server-sent events. Nothing else here.",
    },
]


def _search(query: str) -> list[dict[str, Any]]:
    """A real (tiny) search: documents sharing at least one word of 4+ letters."""
    words = {w for w in re.findall(r"\w+", query.lower()) if len(w) >= 4}
    return [d for d in DOCS if words & set(re.findall(r"\w+", d["content"].lower()))]


@tool
def query_kb(query: str) -> str:
    """Search the knowledge base and return JSON results."""
    results = _search(query)
    return json.dumps({"query": query, "count": len(results), "results": results})


class RecordingMiddleware(AgentMiddleware):
    """Proves the model runs under a real middleware chain (before_model node)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    def before_model(self, state: AgentState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        self.seen.append(len(state["messages"]))
        return None


def _agent(middleware: RecordingMiddleware | None = None) -> Any:
    return create_agent(
        model=ExtractiveChatModel(),
        tools=[query_kb],
        middleware=[middleware or RecordingMiddleware()],
        checkpointer=InMemorySaver(),
        system_prompt="You answer from the knowledge base.",
    )


QUESTION = "How long does a worker lease last before it expires?"


@pytest.mark.asyncio
async def test_agent_calls_query_kb_then_answers_with_citations() -> None:
    middleware = RecordingMiddleware()
    agent = _agent(middleware)
    config = {"configurable": {"thread_id": "t1"}}
    result = await agent.ainvoke({"messages": [HumanMessage(QUESTION)]}, config)
    messages: list[BaseMessage] = result["messages"]

    assert [type(m) for m in messages] == [HumanMessage, AIMessage, ToolMessage, AIMessage]
    call = messages[1].tool_calls[0]
    assert call["name"] == "query_kb"
    assert call["args"] == {"query": QUESTION}
    assert re.fullmatch(r"call_[0-9a-f]{12}", call["id"])
    assert messages[2].tool_call_id == call["id"]

    answer = messages[3]
    assert isinstance(answer.content, str)
    assert answer.content.startswith("From the knowledge base:")
    assert "lease expires after 30 seconds" in answer.content
    assert "[kb:c-lease-1]" in answer.content
    assert 1 <= answer.content.count("[kb:") <= 3
    assert answer.response_metadata["model_name"] == "extractive"
    usage = answer.usage_metadata
    assert usage is not None and usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert middleware.seen == [1, 3]

    # The checkpointer keeps the thread: a second turn sees the history and gets a new call id.
    second = await agent.ainvoke({"messages": [HumanMessage(QUESTION)]}, config)
    assert len(second["messages"]) == 8
    assert second["messages"][5].tool_calls[0]["id"] != call["id"]
    state = await agent.aget_state(config)
    assert state.next == ()


@pytest.mark.asyncio
async def test_agent_is_deterministic_across_threads() -> None:
    answers = []
    for thread in ("a", "b"):
        result = await _agent().ainvoke(
            {"messages": [HumanMessage(QUESTION)]}, {"configurable": {"thread_id": thread}}
        )
        msgs = result["messages"]
        answers.append((msgs[1].tool_calls[0]["id"], msgs[3].content, msgs[3].usage_metadata))
    assert answers[0] == answers[1]


@pytest.mark.asyncio
async def test_no_results_says_nothing_relevant_found() -> None:
    result = await _agent().ainvoke(
        {"messages": [HumanMessage("zzz qqq")]}, {"configurable": {"thread_id": "none"}}
    )
    answer = result["messages"][-1].content
    assert "nothing relevant" in answer
    assert "[kb:" not in answer
    # The question is quoted once (it was quoted with the lookup's copy of it appended).
    assert answer == 'I found nothing relevant in the knowledge base for "zzz qqq".', answer


@pytest.mark.asyncio
async def test_streaming_messages_mode_yields_tool_call_chunks_and_text() -> None:
    agent = _agent()
    config = {"configurable": {"thread_id": "stream"}}
    chunks: list[AIMessageChunk] = []
    async for message, _meta in agent.astream(
        {"messages": [HumanMessage(QUESTION)]}, config, stream_mode="messages"
    ):
        if isinstance(message, AIMessageChunk):
            chunks.append(message)
    tool_chunks = [c for c in chunks if c.tool_call_chunks]
    assert tool_chunks and tool_chunks[0].tool_call_chunks[0]["name"] == "query_kb"
    text = "".join(c.text for c in chunks)
    assert "[kb:c-lease-1]" in text
    assert any(c.usage_metadata for c in chunks)
    final = (await agent.aget_state(config)).values["messages"][-1]
    assert final.content == text
    assert final.usage_metadata["output_tokens"] == count_tokens(final.content)


def test_sync_stream_reassembles_to_the_invoke_result() -> None:
    model = ExtractiveChatModel().bind_tools([query_kb])
    msgs = [HumanMessage(QUESTION)]
    invoked = model.invoke(msgs)
    merged: AIMessageChunk | None = None
    for chunk in model.stream(msgs):
        merged = chunk if merged is None else merged + chunk
    assert merged is not None
    assert merged.tool_calls[0]["args"] == invoked.tool_calls[0]["args"]
    assert merged.tool_calls[0]["id"] == invoked.tool_calls[0]["id"]


def test_preview_and_non_json_kb_output_are_handled() -> None:
    model = ExtractiveChatModel()
    preview = (
        "[tool result offloaded: tool-results/call_x.txt, 12000 chars, sha256 ab12]\n"
        "count=2\n1. id=c-lease-1 title=Worker leases\n"
        "A run lease expires after 30 seconds unless renewed.\n"
        "2. id=c-sse-2 title=Events"
    )
    call = {"name": "query_kb", "args": {"query": QUESTION}, "id": "call_1", "type": "tool_call"}
    history = [
        HumanMessage(QUESTION),
        AIMessage("", tool_calls=[call]),
        ToolMessage(preview, tool_call_id="call_1", name="query_kb"),
    ]
    answer = model.invoke(history)
    assert "lease expires after 30 seconds" in answer.content
    assert "[kb:c-lease-1]" in answer.content and "[kb:c-sse-2]" in answer.content

    # Milvus/Dify-style list of chunks: ids from metadata.chunk_id.
    chunks = [{"content": "Leases expire after 30 seconds.", "score": 0.8, "metadata": {}}]
    chunks[0]["metadata"] = {"chunk_id": "m-7", "source": "s"}
    history[-1] = ToolMessage(json.dumps(chunks), tool_call_id="call_1")
    assert "[kb:m-7]" in model.invoke(history).content


def test_ids_are_read_from_a_column_legend_preview(tmp_path: Any) -> None:
    """Our structured previews name the key names once (legend line), not per result: the
    offline model still cites the ids of the ``id`` column, and only those."""
    import asyncio

    from app.compression.previews import structured_preview
    from app.compression.workdir import Workdir

    results = [
        {
            "id": f"c-{i}",
            "doc_id": f"doc-{i}",
            "score": 0.9 - i / 10,
            "title": f"Lease notes {i}",
            "content": "A run lease expires after 30 seconds unless renewed. " * 10,
        }
        for i in range(3)
    ]
    text = json.dumps({"query": QUESTION, "results": results})
    record = asyncio.run(Workdir(tmp_path).write_tool_result("t", "call_1", text))
    preview = structured_preview("query_kb", text, record, 2400)
    assert preview is not None and "id=" not in preview
    call = {"name": "query_kb", "args": {"query": QUESTION}, "id": "call_1", "type": "tool_call"}
    history = [
        HumanMessage(QUESTION),
        AIMessage("", tool_calls=[call]),
        ToolMessage(preview, tool_call_id="call_1", name="query_kb"),
    ]
    answer = ExtractiveChatModel().invoke(history).content
    assert "lease expires after 30 seconds" in answer
    assert all(f"[kb:c-{i}]" in answer for i in range(3))
    assert "[kb:doc-" not in answer


def test_without_tools_answers_from_the_conversation() -> None:
    model = ExtractiveChatModel()
    history = [
        SystemMessage("system"),
        HumanMessage("My project codename is Bluebird. It ships in May."),
        AIMessage("Noted."),
        HumanMessage("What is the project codename?"),
    ]
    answer = model.invoke(history)
    assert not answer.tool_calls
    assert "Bluebird" in answer.content
    assert model.invoke([HumanMessage("hello there")]).content.startswith("I have no")


# --------------------------------------------------------------------------- summarizer
def _history() -> list[BaseMessage]:
    msgs: list[BaseMessage] = [HumanMessage("I want to understand worker leases. Be brief.")]
    for i in range(6):
        cid = f"call_{i}"
        msgs.append(
            AIMessage("", tool_calls=[{"name": "query_kb", "args": {"query": f"q{i}"}, "id": cid}])
        )
        body = {
            "query": f"q{i}",
            "count": 1,
            "results": [dict(DOCS[0], id=f"c-{i}", url=f"https://docs.example.test/{i}")],
        }
        msgs.append(ToolMessage(json.dumps(body), tool_call_id=cid, name="query_kb"))
        msgs.append(AIMessage(f"Answer number {i} is here [kb:c-{i}]. More detail follows."))
        msgs.append(HumanMessage(f"Follow-up question {i}? With more words."))
    return msgs


@pytest.mark.asyncio
async def test_summarizer_is_deterministic_and_keeps_ids() -> None:
    summarizer = ExtractiveSummarizer()
    first = await summarizer.asummarize(_history(), previous_summary=None, max_tokens=1000)
    second = await summarizer.asummarize(_history(), previous_summary=None, max_tokens=1000)
    assert first == second
    assert "- User: I want to understand worker leases." in first
    assert "Be brief" not in first  # first sentence only
    assert "- Tool call: query_kb(query=q3)" in first
    assert "- Assistant: Answer number 2 is here [kb:c-2]." in first
    for i in range(6):
        assert f"kb:c-{i}" in first
        assert f"https://docs.example.test/{i}" in first
    assert "doc_id:d-worker" in first
    assert count_tokens(first) <= 1000


@pytest.mark.asyncio
async def test_summarizer_respects_max_tokens_and_keeps_goal_and_refs() -> None:
    summarizer = ExtractiveSummarizer()
    text = await summarizer.asummarize(_history(), previous_summary=None, max_tokens=160)
    assert count_tokens(text) <= 160
    assert "earlier lines omitted" in text
    assert "I want to understand worker leases." in text  # the goal survives
    assert "kb:c-0" in text and "kb:c-5" in text  # references survive
    assert "Follow-up question 5?" in text  # the most recent line survives
    tiny = await summarizer.asummarize(_history(), previous_summary=None, max_tokens=10)
    assert 0 < count_tokens(tiny) <= 10


@pytest.mark.asyncio
async def test_summarizer_folds_previous_summary_bounded() -> None:
    summarizer = ExtractiveSummarizer()
    previous = await summarizer.asummarize(_history(), previous_summary=None, max_tokens=1000)
    previous = "Summary of earlier conversation:\n" + previous
    previous += "\n" + "Old filler sentence. " * 400
    newer = [HumanMessage("Now explain events."), AIMessage("Events use SSE [kb:c-sse-2].")]
    text = await summarizer.asummarize(newer, previous_summary=previous, max_tokens=300)
    assert count_tokens(text) <= 300
    assert "Earlier: " in text
    assert "kb:c-0" in text and "kb:c-sse-2" in text  # carried over and new
    assert "- User: Now explain events." in text
    assert "Summary of earlier conversation" not in text  # headers are not folded in twice
    assert text == await summarizer.asummarize(newer, previous_summary=previous, max_tokens=300)


def test_truncate_to_tokens_never_exceeds_the_bound() -> None:
    text = "租约超时是三十秒。" * 50 + " lease " * 50
    for limit in (0, 1, 7, 33, 100):
        assert count_tokens(truncate_to_tokens(text, limit)) <= limit
    assert truncate_to_tokens("short", 10) == "short"


def test_falls_back_to_search_workdir_only_when_the_thread_holds_offloads() -> None:
    model = ExtractiveChatModel()
    tools = [{"type": "function", "function": {"name": n}} for n in ("query_kb", "search_workdir")]
    question = "How often does master key rotation happen?"
    call = {"name": "query_kb", "args": {"query": question}, "id": "call_1", "type": "tool_call"}
    empty = json.dumps({"query": question, "count": 0, "results": []})
    summary = HumanMessage(
        "Summary of earlier conversation: ...",
        additional_kwargs={"threadkeeper": {"kind": "summary"}},
    )
    turn = [
        HumanMessage(question),
        AIMessage("", tool_calls=[call]),
        ToolMessage(empty, tool_call_id="call_1", name="query_kb"),
    ]
    # Nothing offloaded in this thread: searching the workdir cannot help, answer right away.
    plain = model.respond(turn, tools=tools)
    assert not plain.tool_calls and "nothing relevant" in plain.text
    # A summarized thread: the knowledge base has no answer, so search the old tool results.
    searched = model.respond([summary, *turn], tools=tools)
    assert [c["name"] for c in searched.tool_calls] == ["search_workdir"]
    assert searched.tool_calls[0]["args"]["query"] == question
    hits = {
        "hits": [
            {
                "path": "tool-results/call_0.txt",
                "offset": 120,
                "end": 440,
                "snippet": '..."content": "Master key rotation happens each 41 days."...',
                "passage": "Master key rotation happens each 41 days.",
                "result": {"id": "kb-9", "source": "vault.md"},
            }
        ]
    }
    answered = model.respond(
        [
            summary,
            *turn,
            AIMessage("", tool_calls=[{**searched.tool_calls[0]}]),
            ToolMessage(
                json.dumps(hits), tool_call_id=searched.tool_calls[0]["id"], name="search_workdir"
            ),
        ],
        tools=tools,
    )
    assert "41 days" in answered.text and "[kb:kb-9]" in answered.text
    assert "(tool-results/call_0.txt, chars 120-440)" in answered.text


def test_stream_pieces_are_phrases_that_reassemble_the_text() -> None:
    text = "A run lease expires after 30 seconds unless renewed.  " * 6 + "Done."
    pieces = text_pieces(text)
    assert "".join(pieces) == text
    assert 1 < len(pieces) < len(text.split()) // 4
    for piece in pieces[:-1]:
        assert len(piece) >= DELTA_CHARS and piece[-1].isspace() and not piece[0].isspace()
    assert text_pieces("") == [] and text_pieces("short") == ["short"]


async def test_streamed_answer_arrives_in_phrases() -> None:
    agent = _agent()
    chunks: list[str] = []
    async for message, _meta in agent.astream(
        {"messages": [HumanMessage(QUESTION)]},
        {"configurable": {"thread_id": "phrases"}},
        stream_mode="messages",
    ):
        if isinstance(message, AIMessageChunk) and message.text:
            chunks.append(message.text)
    answer = "".join(chunks)
    assert len(answer) > 2 * DELTA_CHARS
    assert chunks == text_pieces(answer)
