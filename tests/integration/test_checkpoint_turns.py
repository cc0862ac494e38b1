"""Issue 36: the turn-keeping prune (``aprune_turns``) and forks on a real compiled graph and
the service's saver.

Two turns (model -> tools -> model each), then a Regenerate (no input, from the state the
second question was applied in) and an Edit (new input, from the state before it), each a fork
with its own version tag, with prunes between: what stays is every turn boundary and every
branch head, each parent relinked to its nearest kept ancestor, every kept state readable whole
(delta chains intact), and no blob that no kept checkpoint names or builds on. Without the tag a
fork reuses the replaced branch's version numbers, and reads back the other branch's messages.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from app.db.checkpoint_codec import fork_tag
from tests.support.checkpoints import saver_on_pool

pytestmark = pytest.mark.integration


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _graph(saver: Any) -> Any:
    calls = {"n": 0}

    def model(state: State) -> dict[str, Any]:
        calls["n"] += 1
        n = calls["n"]
        if state["messages"][-1].type == "human":
            return {"messages": [AIMessage("call", id=f"ai{n}")]}
        return {"messages": [AIMessage(f"answer {n}", id=f"ai{n}")]}

    def tools(state: State) -> dict[str, Any]:
        calls["n"] += 1
        return {"messages": [AIMessage("tool out", id=f"t{calls['n']}")]}

    builder = StateGraph(State)
    builder.add_node("model", model)
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges(
        "model", lambda s: "tools" if s["messages"][-1].content == "call" else END
    )
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


@pytest.fixture
async def saver(clean_db: str) -> AsyncIterator[Any]:
    async with saver_on_pool(clean_db) as made:
        yield made


CFG = {"configurable": {"thread_id": "t"}}


async def _states(graph: Any) -> list[Any]:
    return [s async for s in graph.aget_state_history(CFG)]


def _ids(state: Any) -> list[str]:
    return [m.id for m in state.values.get("messages", [])]


def _first_seen(states: list[Any], message_id: str) -> Any:
    return [s for s in states if message_id in _ids(s)][-1]


async def _orphan_blobs(saver: Any) -> int:
    async with saver.conn.connection() as conn:
        row = await (
            await conn.execute(
                """
                WITH RECURSIVE chain AS (
                    SELECT b.channel, b.version, b.type FROM checkpoints c
                    CROSS JOIN LATERAL jsonb_each_text(c.checkpoint -> 'channel_versions') v
                    JOIN checkpoint_blobs b ON b.thread_id = c.thread_id
                        AND b.channel = v.key AND b.version = v.value
                    WHERE c.thread_id = 't'
                    UNION
                    SELECT b.channel, b.version, b.type FROM chain
                    JOIN checkpoint_blobs b ON b.thread_id = 't'
                        AND b.channel = chain.channel
                        AND b.version = split_part(chain.type, '|', 4)
                    WHERE chain.type LIKE 'delta|%%'
                )
                SELECT count(*) AS n FROM checkpoint_blobs b WHERE b.thread_id = 't'
                AND NOT EXISTS (SELECT 1 FROM chain
                    WHERE chain.channel = b.channel AND chain.version = b.version)
                """
            )
        ).fetchone()
    return int(row["n"])


async def test_turn_boundaries_and_branch_heads_stay_and_forks_keep_their_own_versions(
    saver: Any,
) -> None:
    graph = _graph(saver)
    await graph.ainvoke({"messages": [HumanMessage("q1", id="h1")]}, CFG)
    await graph.ainvoke({"messages": [HumanMessage("q2", id="h2")]}, CFG)
    assert len(await _states(graph)) == 10
    await saver.aprune_turns(["t"])
    states = await _states(graph)
    # Per turn: before its input, the input applied, its end.
    assert [(s.metadata["source"], s.next) for s in states] == [
        ("loop", ()),
        ("loop", ("model",)),
        ("input", ("__start__",)),
        ("loop", ()),
        ("loop", ("model",)),
        ("input", ("__start__",)),
    ]
    for newer, older in itertools.pairwise(states):
        assert (
            newer.parent_config["configurable"]["checkpoint_id"]
            == (older.config["configurable"]["checkpoint_id"])
        )
    old_head = states[0]
    assert await _orphan_blobs(saver) == 0
    async with saver.conn.connection() as conn:
        row = await (
            await conn.execute(
                "SELECT count(*) AS n FROM checkpoint_writes w WHERE w.thread_id = 't' "
                "AND EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = 't' "
                "AND c.parent_checkpoint_id = w.checkpoint_id)"
            )
        ).fetchone()
    assert row["n"] == 0  # pending writes only on branch heads

    # Regenerate: from the state the answer's question was applied in, no input.
    applied = _first_seen(states, "h2")
    with fork_tag("r1"):
        await graph.ainvoke(None, applied.config)
    # Edit: new input from the state before h2.
    with fork_tag("e1"):
        await graph.ainvoke(
            {"messages": [HumanMessage("q2 edited", id="h2e")]}, applied.parent_config
        )
    await saver.aprune_turns(["t"])
    states = await _states(graph)
    heads = [s for s in states if not s.next]
    assert len(heads) == 4  # turn 1's end, and the three versions of turn 2
    head = await graph.aget_state(CFG)
    assert _ids(head)[-4:] and "h2e" in _ids(head) and "h2" not in _ids(head)
    by_id = {s.config["configurable"]["checkpoint_id"]: s for s in states}
    applied_id = applied.config["configurable"]["checkpoint_id"]
    before_id = applied.parent_config["configurable"]["checkpoint_id"]
    children = {
        cid: [
            s
            for s in states
            if (s.parent_config or {}).get("configurable", {}).get("checkpoint_id") == cid
        ]
        for cid in (applied_id, before_id)
    }
    assert len(children[applied_id]) == 2  # the replaced answer and the regenerated one
    assert len(children[before_id]) == 2  # the replaced question and the edited one
    # Every branch reads back whole at its checkpoint.
    kept_old = by_id[old_head.config["configurable"]["checkpoint_id"]]
    assert _ids(kept_old) == _ids(old_head)
    regenerated = next(s for s in children[applied_id] if s is not kept_old)
    assert (
        _ids(regenerated)[:5] == _ids(old_head)[:5] and _ids(regenerated)[5:] != _ids(old_head)[5:]
    )
    assert await _orphan_blobs(saver) == 0
    # The fork's versions carry its tag: no version number of the replaced branch reused.
    async with saver.conn.connection() as conn:
        rows = await (
            await conn.execute(
                "SELECT version FROM checkpoint_blobs WHERE thread_id = 't' AND channel = 'messages'"
            )
        ).fetchall()
    versions = [r["version"] for r in rows]
    assert any(v.endswith(".r1") for v in versions) and any(v.endswith(".e1") for v in versions)
    numbers = [v for v in versions if "." not in v]
    assert len(numbers) == len(set(numbers))


async def test_a_fork_without_its_tag_reads_the_replaced_branch(saver: Any) -> None:
    """Why forks are tagged: the fork's blob for a version number the replaced branch already
    wrote is not written (first writer wins), so the fork would read the other branch."""
    graph = _graph(saver)
    await graph.ainvoke({"messages": [HumanMessage("q1", id="h1")]}, CFG)
    states = await _states(graph)
    applied = _first_seen(states, "h1")
    out = await graph.ainvoke(None, applied.config)  # no tag
    made = [m.id for m in out["messages"]]
    assert made != _ids(states[0])  # the run made new messages...
    head = await graph.aget_state(CFG)
    # ...but its versions were the replaced branch's numbers, whose blobs stayed: the thread
    # reads back the other branch. With the fork's tag it reads back its own.
    assert _ids(head) == _ids(states[0])
    with fork_tag("r2"):
        again = await graph.ainvoke(None, applied.config)
    assert _ids(await graph.aget_state(CFG)) == [m.id for m in again["messages"]]
