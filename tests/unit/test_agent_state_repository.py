"""AgentStateRepository goes through the compiled graph and refuses a graph without checkpointer."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from app.agents.graph import build_agent_runtime
from app.compression.summary import ContextCompressor
from app.compression.workdir import Workdir
from app.offline.extractive import ExtractiveChatModel
from app.offline.summarizer import ExtractiveSummarizer
from app.repositories.agent_state import AgentStateRepository, CheckpointerRequired


def runtime(tmp_path: Path, checkpointer: InMemorySaver | None):  # type: ignore[no-untyped-def]
    compressor = ContextCompressor(summarizer=ExtractiveSummarizer(), workdir=Workdir(tmp_path))
    return build_agent_runtime(
        model=ExtractiveChatModel(),
        tools=[],
        compressor=compressor,
        system_prompt="You answer.",
        checkpointer=checkpointer,
    )


def test_graph_without_checkpointer_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointerRequired):
        AgentStateRepository(runtime(tmp_path, None).graph)


async def test_replace_messages_keeps_an_idle_thread_idle(tmp_path: Path) -> None:
    rt = runtime(tmp_path, InMemorySaver())
    repo = AgentStateRepository(rt.graph)
    cfg = rt.config_for("t1")
    await rt.graph.ainvoke({"messages": [HumanMessage("first question", id="h1")]}, cfg)
    before = await repo.get("t1")
    assert before.next == () and len(before.messages) == 2
    view = [HumanMessage("summary of before", id="s1"), AIMessage("kept answer", id="a1")]
    await repo.replace_messages("t1", view)
    after = await repo.get("t1")
    assert after.next == ()
    assert [m.content for m in after.messages] == ["summary of before", "kept answer"]
    # The next turn sees the new view followed by the new input.
    await rt.graph.ainvoke({"messages": [HumanMessage("second question", id="h2")]}, cfg)
    final = await repo.get("t1")
    assert [m.content for m in final.messages][:3] == [
        "summary of before",
        "kept answer",
        "second question",
    ]
    assert (await repo.get("unknown-thread")).messages == []
