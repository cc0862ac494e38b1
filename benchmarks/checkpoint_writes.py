"""CPU of a turn's checkpoint writes: a statement per row in a pipeline (upstream's shape) against
one statement per checkpoint and per task's writes (app/db/checkpoint_sql.py), side by side.

Run: ``.venv/bin/python benchmarks/checkpoint_writes.py`` (under a minute; ``--turns``,
``--concurrency``, ``--rounds``). Database: a fresh, migrated one on the server named by
``DATABASE_URL`` / ``TEST_DATABASE_URL``; the saver on a pool configured as the service's
(autocommit, every statement prepared, the same check and reset hooks).

A turn is what the worker's graph writes for a question answered after one ``query_kb`` call:
four checkpoints (the input, then after the model, the tool and the model again), each with the
thread's messages grown by one (stored as deltas) and a small channel besides, and three tasks'
writes (the step's new message and a routing channel). ``--concurrency`` threads write at once,
as a worker's runs do. Only this process's CPU counts (``time.process_time``), not
PostgreSQL's. The two paths alternate round by round (noise on a shared machine hits both
alike); the medians of CPU ms per turn and their ratio are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from app.db.checkpointer import BoundedPostgresSaver, check_pooled, stamp_returned
from app.db.session import warm_checkouts
from app.db.urls import libpq_url
from benchmarks.common import fresh_database, print_side_by_side, server_from_env

PATHS = {"a statement per row": True, "one statement": False}
ANSWER = " ".join(f"word{i}" for i in range(60))
RESULT = "\n".join(f"[kb:{i}] a passage of the knowledge base, score 0.{i}. " * 4 for i in range(5))


def turn_messages(thread: str, n: int) -> list[BaseMessage]:
    """The four messages one turn adds: the question, the tool call, its result, the answer."""
    call = {"name": "query_kb", "args": {"query": f"question {n}"}, "id": f"c-{thread}-{n}"}
    return [
        HumanMessage(f"question {n} about the product", id=f"h-{thread}-{n}"),
        AIMessage("", tool_calls=[call], id=f"a-{thread}-{n}"),
        ToolMessage(RESULT, tool_call_id=call["id"], name="query_kb", id=f"t-{thread}-{n}"),
        AIMessage(ANSWER, id=f"b-{thread}-{n}"),
    ]


class Thread:
    """One thread's checkpoint chain (ids, versions, the messages so far)."""

    def __init__(self) -> None:
        self.id = str(uuid.uuid4())
        self.checkpoint_id: str | None = None
        self.version: str | None = None
        self.step = -1
        self.messages: list[BaseMessage] = []
        self.turns = 0

    def config(self) -> Any:
        return {
            "configurable": {
                "thread_id": self.id,
                "checkpoint_ns": "",
                "checkpoint_id": self.checkpoint_id,
            }
        }

    async def put(self, saver: BoundedPostgresSaver, message: BaseMessage) -> None:
        self.messages = [*self.messages, message]
        self.version = saver.get_next_version(self.version, None)
        checkpoint: Any = dict(empty_checkpoint())
        checkpoint["id"] = str(uuid6(clock_seq=self.step))
        checkpoint["channel_values"] = {"messages": self.messages, "jump_to": None}
        checkpoint["channel_versions"] = {"messages": self.version}
        metadata: Any = {"source": "loop", "step": self.step}
        config = await saver.aput(self.config(), checkpoint, metadata, {"messages": self.version})
        self.checkpoint_id = config["configurable"]["checkpoint_id"]
        self.step += 1

    async def write(self, saver: BoundedPostgresSaver, message: BaseMessage) -> None:
        writes = [("messages", [message]), ("branch:to:model", None)]
        await saver.aput_writes(self.config(), writes, str(uuid.uuid4()))

    async def turn(self, saver: BoundedPostgresSaver) -> None:
        question, call, result, answer = turn_messages(self.id, self.turns)
        await self.put(saver, question)
        for message in (call, result, answer):
            await self.write(saver, message)
            await self.put(saver, message)
        self.turns += 1


async def one_round(saver: BoundedPostgresSaver, threads: list[Thread], turns: int) -> float:
    """CPU ms per turn over ``turns`` turns, spread over the threads, all at once."""
    per_thread = max(turns // len(threads), 1)

    async def run(thread: Thread) -> None:
        for _ in range(per_thread):
            await thread.turn(saver)

    start = time.process_time()
    await asyncio.gather(*(run(t) for t in threads))
    return (time.process_time() - start) * 1000 / (per_thread * len(threads))


async def measure(url: str, args: argparse.Namespace) -> dict[str, list[float]]:
    async with AsyncConnectionPool(
        libpq_url(url),
        min_size=args.concurrency,
        max_size=args.concurrency,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        check=check_pooled,
        reset=stamp_returned,
        open=False,
    ) as pool:
        saver = BoundedPostgresSaver(pool, acquire_timeout=30)
        await saver.setup()
        figures: dict[str, list[float]] = {name: [] for name in PATHS}
        with warm_checkouts():
            for rows in PATHS.values():  # connect, prepare, warm up
                saver.row_statements = rows
                await one_round(
                    saver, [Thread() for _ in range(args.concurrency)], args.concurrency
                )
            for _ in range(args.rounds):
                for name, rows in PATHS.items():
                    # New threads each round: every round writes threads of the same lengths.
                    threads = [Thread() for _ in range(args.concurrency)]
                    saver.row_statements = rows
                    figures[name].append(await one_round(saver, threads, args.turns))
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--turns", type=int, default=200, help="turns per round (each thread a share, from empty)"
    )
    parser.add_argument("--concurrency", type=int, default=20, help="threads writing at once")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per path")
    args = parser.parse_args()
    with fresh_database(server_from_env(), "tk_ckwrites") as url:
        figures = asyncio.run(measure(url, args))
    print(
        f"{args.turns} turns per round (4 checkpoints, 3 tasks' writes each), "
        f"{args.concurrency} threads at once, {args.rounds} rounds"
    )
    print_side_by_side(figures, "CPU ms/turn", "one statement / a statement per row")


if __name__ == "__main__":
    main()
