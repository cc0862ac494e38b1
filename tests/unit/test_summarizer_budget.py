"""The LLM summarizer's transcript always fits its input budget, whatever one message weighs."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from app.compression.summarizers import clip_line, transcript_chunks
from app.compression.tokens import count_tokens


def test_chunks_fit_the_budget_and_keep_order() -> None:
    messages = [
        HumanMessage(" ".join(f"alpha{i}" for i in range(5000))),
        AIMessage("", tool_calls=[{"id": "c1", "name": "query_kb", "args": {"query": "x"}}]),
        ToolMessage("result " * 3000, tool_call_id="c1", name="query_kb"),
        HumanMessage("short question at the end"),
    ]
    chunks = transcript_chunks(messages, budget_tokens=1000)
    assert len(chunks) >= 2
    assert all(count_tokens(c) <= 1000 for c in chunks)
    joined = "\n\n".join(chunks)
    assert joined.index("User: alpha0") < joined.index("Assistant called tool query_kb")
    assert joined.index("Tool result (query_kb") < joined.index("short question at the end")
    assert "tokens omitted" in joined  # the oversized entries were clipped, and say so
    assert "alpha4999" in joined  # ...keeping their tail as well as their head


def test_clip_line_leaves_small_lines_alone() -> None:
    assert clip_line("User: hi", 50) == "User: hi"
    clipped = clip_line("x " * 5000, 100)
    assert count_tokens(clipped) < 130 and "omitted" in clipped
