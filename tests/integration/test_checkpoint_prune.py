"""The one-statement keep-latest prune (app/db/checkpoint_prune.py) against upstream's.

Two threads get the same history from a real compiled graph (a message channel, a tool-like
step that leaves pending writes); one is pruned by ``BoundedPostgresSaver.aprune``, the other by
upstream ``AsyncPostgresSaver.aprune``: the rows left must be the same, the state read back the
same. A thread the statement does not cover (a second namespace) goes to upstream's prune. A
prune whose connection breaks mid-statement changes nothing.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from psycopg_pool import AsyncConnectionPool

from app.db.checkpoint_delta import MAX_DEPTH
from app.db.checkpointer import BoundedPostgresSaver
from app.db.urls import libpq_url
from tests.support.checkpoints import saver_on_pool

pytestmark = pytest.mark.integration


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    steps: Annotated[list[str], operator.add]


def _graph(saver: Any) -> Any:
    def model(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage(f"answer {len(state['messages'])}")], "steps": ["model"]}

    def tool(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage("tool said")], "steps": ["tool"]}

    builder = StateGraph(State)
    builder.add_node("model", model)
    builder.add_node("tool", tool)
    builder.add_edge(START, "model")
    builder.add_edge("model", "tool")
    builder.add_edge("tool", END)
    return builder.compile(checkpointer=saver)


@pytest.fixture
async def pool(clean_db: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with saver_on_pool(clean_db) as saver:
        yield saver.conn


async def _history(graph: Any, thread_id: str, turns: int, first: int = 0) -> None:
    config = {"configurable": {"thread_id": thread_id}}
    for i in range(first, first + turns):
        await graph.ainvoke({"messages": [HumanMessage(f"q{i}", id=f"h{i}")]}, config)


async def _rows(pool: AsyncConnectionPool[Any], thread_id: str) -> dict[str, Any]:
    async with pool.connection() as conn:
        checkpoints = await (
            await conn.execute(
                "SELECT checkpoint_ns, parent_checkpoint_id IS NULL AS root FROM checkpoints "
                "WHERE thread_id = %s ORDER BY checkpoint_ns, checkpoint_id",
                (thread_id,),
            )
        ).fetchall()
        blobs = await (
            await conn.execute(
                "SELECT channel, count(*) AS n FROM checkpoint_blobs WHERE thread_id = %s "
                "GROUP BY channel ORDER BY channel",
                (thread_id,),
            )
        ).fetchall()
        writes = await (
            await conn.execute(
                "SELECT count(*) AS n FROM checkpoint_writes WHERE thread_id = %s", (thread_id,)
            )
        ).fetchone()
    return {"checkpoints": checkpoints, "blobs": blobs, "writes": writes}


async def _off_chain_blobs(pool: AsyncConnectionPool[Any], thread_id: str) -> int:
    """Blobs neither the latest checkpoint's nor on its delta chains."""
    async with pool.connection() as conn:
        row = await (
            await conn.execute(
                """
                WITH RECURSIVE chain AS (
                    SELECT b.channel, b.version, b.type FROM checkpoints c
                    CROSS JOIN LATERAL jsonb_each_text(c.checkpoint -> 'channel_versions') v
                    JOIN checkpoint_blobs b ON b.thread_id = c.thread_id
                        AND b.channel = v.key AND b.version = v.value
                    WHERE c.thread_id = %(t)s
                    UNION ALL
                    SELECT b.channel, b.version, b.type FROM chain
                    JOIN checkpoint_blobs b ON b.thread_id = %(t)s
                        AND b.channel = chain.channel
                        AND b.version = split_part(chain.type, '|', 4)
                    WHERE chain.type LIKE 'delta|%%'
                )
                SELECT count(*) AS n FROM checkpoint_blobs b WHERE b.thread_id = %(t)s
                AND NOT EXISTS (SELECT 1 FROM chain
                    WHERE chain.channel = b.channel AND chain.version = b.version)
                """,
                {"t": thread_id},
            )
        ).fetchone()
    return int(row["n"])


async def test_keep_latest_leaves_what_upstream_leaves(pool: AsyncConnectionPool[Any]) -> None:
    ours = BoundedPostgresSaver(pool, acquire_timeout=5)
    upstream = AsyncPostgresSaver(pool)
    graph = _graph(ours)
    graphs = {"t-ours": graph, "t-upstream": _graph(upstream)}
    for tid, writer in graphs.items():
        await _history(writer, tid, 3)
    # A pending write on the head, as a step that finished before a crash leaves it.
    for tid in ("t-ours", "t-upstream"):
        head = await ours.aget_tuple({"configurable": {"thread_id": tid}})
        assert head is not None
        await ours.aput_writes(head.config, [("steps", ["pending"])], task_id="task-1")
    before = await _rows(pool, "t-ours")
    assert len(before["checkpoints"]) > 1

    await ours.aprune(["t-ours"], strategy="keep_latest")
    await upstream.aprune(["t-upstream"], strategy="keep_latest")

    got, want = await _rows(pool, "t-ours"), await _rows(pool, "t-upstream")
    # The same rows, but for the message versions the latest one's delta builds on.
    assert got["checkpoints"] == want["checkpoints"]
    assert got["writes"] == want["writes"]
    assert [b for b in got["blobs"] if b["channel"] != "messages"] == [
        b for b in want["blobs"] if b["channel"] != "messages"
    ]
    assert await _off_chain_blobs(pool, "t-ours") == 0
    assert got["checkpoints"] == [{"checkpoint_ns": "", "root": True}]
    assert got["writes"]["n"] == 1  # the head's pending write stays
    for tid in ("t-ours", "t-upstream"):
        state = await graphs[tid].aget_state({"configurable": {"thread_id": tid}})
        assert [m.content for m in state.values["messages"]][-3:] == [
            "q2",
            "answer 7",
            "tool said",
        ]
        head = await ours.aget_tuple({"configurable": {"thread_id": tid}})
        assert head is not None
        assert head.pending_writes == [("task-1", "steps", ["pending"])]

    # The next turn goes on from the pruned head.
    await _history(graph, "t-ours", 1, first=3)
    state = await graph.aget_state({"configurable": {"thread_id": "t-ours"}})
    assert len(state.values["messages"]) == 12


async def _add_subgraph_call(pool: AsyncConnectionPool[Any], thread_id: str) -> None:
    """A subgraph's checkpoint (namespace "child:<task>") whose root call is no longer kept."""
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, checkpoint, "
            "metadata) SELECT thread_id, 'child:task', checkpoint_id, checkpoint, "
            "jsonb_build_object('parents', jsonb_build_object('', checkpoint_id)) "
            "FROM checkpoints WHERE thread_id = %s ORDER BY checkpoint_id LIMIT 1",
            (thread_id,),
        )


async def test_a_thread_with_another_namespace_goes_to_upstreams_prune(
    pool: AsyncConnectionPool[Any],
) -> None:
    # Written by upstream's saver: whole blobs, no deltas.
    await _history(_graph(AsyncPostgresSaver(pool)), "t-sub", 2)
    await _add_subgraph_call(pool, "t-sub")
    await BoundedPostgresSaver(pool, acquire_timeout=5).aprune(["t-sub"], strategy="keep_latest")
    rows = await _rows(pool, "t-sub")
    # Upstream's prune ran: the stale subgraph call is gone with the root's old checkpoints.
    assert rows["checkpoints"] == [{"checkpoint_ns": "", "root": True}]


async def test_a_thread_upstream_would_prune_is_kept_whole_when_it_has_deltas(
    pool: AsyncConnectionPool[Any],
) -> None:
    ours = BoundedPostgresSaver(pool, acquire_timeout=5)
    graph = _graph(ours)
    await _history(graph, "t-sub-delta", 2)
    await _add_subgraph_call(pool, "t-sub-delta")
    before = await _rows(pool, "t-sub-delta")
    await ours.aprune(["t-sub-delta"], strategy="keep_latest")
    assert await _rows(pool, "t-sub-delta") == before
    state = await graph.aget_state({"configurable": {"thread_id": "t-sub-delta"}})
    assert len(state.values["messages"]) == 6


async def test_a_prune_broken_mid_statement_changes_nothing(
    pool: AsyncConnectionPool[Any], clean_db: str
) -> None:
    ours = BoundedPostgresSaver(pool, acquire_timeout=5)
    graph = _graph(ours)
    await _history(graph, "t-broken", 2)
    before = await _rows(pool, "t-broken")
    async with await psycopg.AsyncConnection.connect(libpq_url(clean_db)) as blocker:
        # Hold one blob row the prune must delete: the statement has then done its other
        # deletes and waits; its connection is killed there.
        await blocker.execute(
            "SELECT 1 FROM checkpoint_blobs WHERE thread_id = 't-broken' FOR UPDATE"
        )
        pruning = asyncio.create_task(ours.aprune(["t-broken"]))
        for _ in range(1500):  # a hang guard, not a timing assertion
            # pg_stat_activity is read once per transaction unless its snapshot is cleared.
            await blocker.execute("SELECT pg_stat_clear_snapshot()")
            row = await (
                await blocker.execute(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE '%%WITH RECURSIVE head AS%%'"
                )
            ).fetchone()
            if row:
                break
            await asyncio.sleep(0.02)
        assert row, "the prune never waited for the held blob row"
        await blocker.execute("SELECT pg_terminate_backend(%s)", (row[0],))
        with pytest.raises(psycopg.OperationalError):
            await asyncio.wait_for(pruning, 30)
        await blocker.rollback()
    assert await _rows(pool, "t-broken") == before
    state = await graph.aget_state({"configurable": {"thread_id": "t-broken"}})
    assert len(state.values["messages"]) == 6
    await ours.aprune(["t-broken"])  # and a later prune completes
    assert len((await _rows(pool, "t-broken"))["checkpoints"]) == 1


async def test_a_prune_after_every_turn_keeps_only_the_heads_chain(
    pool: AsyncConnectionPool[Any],
) -> None:
    """The worker prunes after every turn. A version that was on the head's delta chain when its
    checkpoint was deleted, and falls off the chain once a whole version starts a new one, must
    go then: no checkpoint names it any more (it once leaked, one blob per step, forever)."""
    saver = BoundedPostgresSaver(pool, acquire_timeout=5)
    graph = _graph(saver)
    turns = MAX_DEPTH  # three message versions a turn: the chain restarts about three times
    for i in range(turns):
        await _history(graph, "t-long", 1, first=i)
        await saver.aprune(["t-long"], strategy="keep_latest")
        assert await _off_chain_blobs(pool, "t-long") == 0, f"turn {i}"
    blobs = {b["channel"]: b["n"] for b in (await _rows(pool, "t-long"))["blobs"]}
    assert blobs["messages"] <= MAX_DEPTH + 1
    state = await graph.aget_state({"configurable": {"thread_id": "t-long"}})
    assert len(state.values["messages"]) == 3 * turns
    assert [m.content for m in state.values["messages"]][:3] == ["q0", "answer 1", "tool said"]
