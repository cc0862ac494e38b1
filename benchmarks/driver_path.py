"""CPU per statement of a run's step write and of a knowledge-base search (``query_kb``, once a
turn): through SQLAlchemy (``autocommit``: a connection object, execution context and result
around each statement) against the driver path the worker uses (``app/db/driver.py``: the same
``text()`` statement on a checkout of the same pool), side by side.

Run: ``.venv/bin/python benchmarks/driver_path.py`` (under a minute; ``--writes``,
``--concurrency``, ``--rounds``). Database: a fresh, migrated one on the server named by
``DATABASE_URL`` / ``TEST_DATABASE_URL``.

Each write is what a run's delta flush sends (``RunLedger.write_step`` with one delta event:
the most frequent statement of a turn), ``--concurrency`` runs writing at once, as a worker's
runs do, inside ``warm_checkouts()`` as the worker's are. Each search is ``query_kb``'s
(``KnowledgeBaseSearch``, five hits of 40 documents), as many at once. Only this process's CPU
counts (``time.process_time``), not PostgreSQL's. The two paths alternate round by round (noise
on a shared machine hits both alike); the medians of CPU ms per statement and their ratio are
printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.driver import driver
from app.db.models import AgentRunRequest, Conversation, RequestStatus
from app.db.run_events import DeltaEvent, event_row
from app.db.session import autocommit, create_engine, create_session_factory, warm_checkouts
from app.repositories.knowledge_base import KnowledgeBaseRepository, KnowledgeBaseSearch
from app.repositories.run_leases import RunLeaseStatements
from app.repositories.run_steps import RunStepRepository
from benchmarks.common import fresh_database, print_side_by_side, server_from_env

HOLDER = "bench-holder"
Opener = Callable[[AsyncEngine], contextlib.AbstractAsyncContextManager[Any]]
PATHS: dict[str, Opener] = {"sqlalchemy (autocommit)": autocommit, "driver": driver}


async def running_runs(engine: AsyncEngine, count: int) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """``count`` threads, each with a running run leased to ``HOLDER``: (thread, run)."""
    sessions = create_session_factory(engine)
    runs = []
    for _ in range(count):
        async with sessions() as session, session.begin():
            conv = Conversation(id=uuid.uuid4(), owner_id="bench")
            session.add(conv)
            await session.flush()
            session.add(
                AgentRunRequest(
                    id=uuid.uuid4(),
                    thread_id=conv.id,
                    seq=1,
                    payload={"content": "hi", "lc_id": f"h-{conv.id}"},
                    status=RequestStatus.QUEUED,
                )
            )
            await session.flush()
            started = await RunLeaseStatements(session).start_head(conv.id, HOLDER, 600)
            assert started is not None
            runs.append((conv.id, started.run_id))
    return runs


async def one_round(
    engine: AsyncEngine, opener: Opener, runs: list[tuple[uuid.UUID, uuid.UUID]], writes: int
) -> float:
    """CPU ms per write over ``writes`` step writes, spread over the runs, all at once."""
    per_run = max(writes // len(runs), 1)

    async def run_writes(thread_id: uuid.UUID, run_id: uuid.UUID) -> None:
        for i in range(per_run):
            event = DeltaEvent(type="delta", lc_id=f"ai-{run_id}", text=f"piece {i} ")
            async with opener(engine) as conn:
                result = await RunStepRepository(conn).write(
                    thread_id=thread_id,
                    run_id=run_id,
                    holder=HOLDER,
                    messages=[],
                    events=[event_row(event)],
                    lock_timeout_ms=30_000,
                )
            assert result.leased

    start = time.process_time()
    await asyncio.gather(*(run_writes(t, r) for t, r in runs))
    return (time.process_time() - start) * 1000 / (per_run * len(runs))


async def knowledge_base(engine: AsyncEngine) -> None:
    """40 documents of 4 chunks in knowledge base ``bench`` of owner ``bench``."""
    sessions = create_session_factory(engine)
    words = ["lease", "heartbeat", "worker", "claim", "queue", "thread", "stream", "token"]
    async with sessions() as session, session.begin():
        for i in range(40):
            await KnowledgeBaseRepository(session).add_document(
                kb="bench",
                owner_id="bench",
                title=f"doc {i}",
                source="bench",
                url=f"https://example.test/{i}",
                chunks=[
                    f"The {words[(i + j) % 8]} and the {words[(i * j + 1) % 8]}, paragraph {j}."
                    for j in range(4)
                ],
            )


async def search_round(engine: AsyncEngine, opener: Opener, searches: int, at_once: int) -> float:
    """CPU ms per search over ``searches`` searches, ``at_once`` at a time."""
    per_task = max(searches // at_once, 1)

    async def run_searches(k: int) -> None:
        for i in range(per_task):
            async with opener(engine) as conn:
                hits = await KnowledgeBaseSearch(conn).search(
                    kb="bench", owner_id="bench", query=f"lease {(k + i) % 7} worker", limit=5
                )
            assert hits

    start = time.process_time()
    await asyncio.gather(*(run_searches(k) for k in range(at_once)))
    return (time.process_time() - start) * 1000 / (per_task * at_once)


@contextlib.asynccontextmanager
async def engine_on(url: str, concurrency: int) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(url, pool_size=max(concurrency // 2, 2))
    try:
        yield engine
    finally:
        await engine.dispose()


async def measure(
    url: str, args: argparse.Namespace
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """CPU ms per step write and per search, by path."""
    async with engine_on(url, args.concurrency) as engine:
        runs = await running_runs(engine, args.concurrency)
        await knowledge_base(engine)
        writes: dict[str, list[float]] = {name: [] for name in PATHS}
        searches: dict[str, list[float]] = {name: [] for name in PATHS}
        with warm_checkouts():
            for opener in PATHS.values():  # connect, prepare, warm up
                await one_round(engine, opener, runs, len(runs) * 5)
                await search_round(engine, opener, args.concurrency * 5, args.concurrency)
            for _ in range(args.rounds):
                for name, opener in PATHS.items():
                    writes[name].append(await one_round(engine, opener, runs, args.writes))
                    searches[name].append(
                        await search_round(engine, opener, args.writes, args.concurrency)
                    )
        return writes, searches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=2000, help="step writes per round")
    parser.add_argument("--concurrency", type=int, default=20, help="runs writing at once")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per path")
    args = parser.parse_args()
    with fresh_database(server_from_env(), "tk_driver") as url:
        writes, searches = asyncio.run(measure(url, args))
    print(
        f"{args.writes} step writes per round, {args.concurrency} runs at once, {args.rounds} rounds"
    )
    print_side_by_side(writes, "CPU ms/write", "driver / sqlalchemy")
    print(
        f"{args.writes} knowledge-base searches per round, {args.concurrency} at once, "
        f"{args.rounds} rounds"
    )
    print_side_by_side(searches, "CPU ms/search", "driver / sqlalchemy")


if __name__ == "__main__":
    main()
