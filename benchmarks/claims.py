"""Claim latency and an idle worker's database time at 1k / 10k / 100k threads (issue 23,
item 5, the claim part). Not a test: figures, "before" and "after" measured side by side in one
run on the same seeded database.

Run: ``.venv/bin/python benchmarks/claims.py`` (about 3 minutes; ``--sizes 1000,10000`` for a
shorter run). ``benchmarks/turns.py`` imports ``measure`` and ``report``.

Per size, a fresh database is seeded in SQL with that many idle threads, each with one answered
request and its finished run (what a long-lived deployment mostly holds), then:

1. idle: a real ``RunWorker`` claim loop runs for ``--idle-seconds`` with nothing queued.
   *before*: the old claim (kept below as ``OldClaims``, the query text of the old
   ``claimable_thread``/``oldest_queued``) polled every ``worker_poll_seconds`` (0.5 s), as the
   old loop did; *after*: today's loop with its listener up (NOTIFY wakes it; the safety-net
   poll every ``worker_idle_poll_seconds``). Figures: statements/s and database time per second
   of idling (the sum of the statements' round trips, measured at the driver; BEGIN/COMMIT and
   the pool's checkout ping are not statements and not counted, on either side);
2. claim latency: ``--queued`` threads get one queued request each; the look at the queue and
   the dispatch of its head (old: ``claimable_thread`` + ``oldest_queued``; new:
   ``pick_thread`` + ``start_head``, which also starts the run) run in a transaction that is rolled back, alternating
   old and new, ``--repeats`` times; medians and their ratio.

The claim loop's ``run_events`` pruning (every 5 minutes by default) is off on both sides.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import event, exists, func, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.config import WorkerSettings
from app.db.models import (
    ACTIVE_RUN_STATUSES,
    AgentRun,
    AgentRunRequest,
    Conversation,
    RequestStatus,
)
from app.db.session import create_engine, create_session_factory
from app.db.urls import libpq_url
from app.repositories.claim_queue import ClaimQueueRepository
from app.repositories.run_leases import RunLeaseStatements
from app.repositories.runs import RunRepository
from app.worker.claims import ClaimedRun, RunClaims
from app.worker.engine import RunWorker
from benchmarks.common import fresh_database, server_from_env

SIZES = (1_000, 10_000, 100_000)


# --- the old claim, kept as it was (app/repositories/runs.py before issue 23) ----------------
def old_claimable_thread() -> Any:
    queued = (
        select(func.min(AgentRunRequest.created_at))
        .where(
            AgentRunRequest.thread_id == Conversation.id,
            AgentRunRequest.status == RequestStatus.QUEUED,
        )
        .scalar_subquery()
    )
    active = exists().where(
        AgentRun.thread_id == Conversation.id,
        AgentRun.status.in_(ACTIVE_RUN_STATUSES),
    )
    return (
        select(Conversation.id)
        .where(queued.is_not(None), ~active)
        .order_by(queued)
        .limit(1)
        .with_for_update(of=Conversation, skip_locked=True)
    )


def old_oldest_queued(thread_id: uuid.UUID) -> Any:
    return (
        select(AgentRunRequest)
        .where(
            AgentRunRequest.thread_id == thread_id,
            AgentRunRequest.status == RequestStatus.QUEUED,
        )
        .order_by(AgentRunRequest.seq)
        .limit(1)
        .with_for_update(skip_locked=True)
    )


class OldClaims(RunClaims):
    """The old claim's look at the threads (only ever idle here: it finds nothing to start),
    and the old lease check (no look at the next expiry: it ran on every poll)."""

    async def recover_expired(self) -> int:
        async with self.sessions() as session, session.begin():
            expired = await RunRepository(session).expired()
            assert not expired, "the idle phase has no running run"
            return 0

    async def claim_next(self) -> ClaimedRun | None:
        async with self.sessions() as session, session.begin():
            thread_id = await session.scalar(old_claimable_thread())
            assert thread_id is None, "the idle phase has nothing queued"
            return None


# --- seeding -----------------------------------------------------------------------------------
def seed_idle_threads(url: str, threads: int) -> None:
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO conversations (id, owner_id, agent_id, title) "
            "SELECT gen_random_uuid(), 'bench', 'default', 'idle' FROM generate_series(1, %s)",
            (threads,),
        )
        conn.execute(
            "INSERT INTO agent_run_requests (id, conversation_id, seq, payload, status) "
            "SELECT gen_random_uuid(), id, 1, '{}'::jsonb, 'dispatched' FROM conversations"
        )
        conn.execute(
            "INSERT INTO agent_runs (id, conversation_id, request_id, status, started_at, "
            "finished_at) SELECT gen_random_uuid(), conversation_id, id, 'completed', "
            "now() - interval '1 hour', now() - interval '1 hour' FROM agent_run_requests"
        )
        conn.execute("UPDATE conversations SET next_request_seq = 2, next_message_seq = 2")
        conn.execute("VACUUM ANALYZE")


def queue_requests(url: str, count: int) -> None:
    """``count`` of the idle threads get one queued request each."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO agent_run_requests (id, conversation_id, seq, payload, status) "
            "SELECT gen_random_uuid(), id, 2, jsonb_build_object('content', 'q', 'lc_id', "
            "'user-' || gen_random_uuid(), 'message_id', gen_random_uuid()), 'queued' "
            "FROM (SELECT id FROM conversations ORDER BY id LIMIT %s) c",
            (count,),
        )
        conn.execute("ANALYZE agent_run_requests")


# --- measuring ---------------------------------------------------------------------------------
@contextlib.contextmanager
def statement_clock(engine: AsyncEngine) -> Iterator[list[float]]:
    """The round-trip time (s) of every statement the engine sends meanwhile."""
    took: list[float] = []
    started: dict[int, float] = {}

    def before(_c: Any, cursor: Any, *_: Any) -> None:
        started[id(cursor)] = time.perf_counter()

    def after(_c: Any, cursor: Any, *_: Any) -> None:
        took.append(time.perf_counter() - started.pop(id(cursor), time.perf_counter()))

    sync = engine.sync_engine
    event.listen(sync, "before_cursor_execute", before)
    event.listen(sync, "after_cursor_execute", after)
    try:
        yield took
    finally:
        event.remove(sync, "before_cursor_execute", before)
        event.remove(sync, "after_cursor_execute", after)


@dataclass(frozen=True, slots=True)
class Idle:
    statements_per_s: float
    db_ms_per_s: float


async def idle_worker(
    engine: AsyncEngine,
    sessions: async_sessionmaker[AsyncSession],
    *,
    old: bool,
    seconds: float,
) -> Idle:
    """A real claim loop with nothing to do, measured for ``seconds`` after its first round."""
    settings = WorkerSettings(
        worker_poll_seconds=0.5, worker_idle_poll_seconds=10.0, run_events_retention_seconds=0
    )
    worker = RunWorker(
        settings=settings,
        sessions=sessions,
        engine=engine,
        agents=None,  # type: ignore[arg-type]
    )
    if old:
        # The old loop: a claim round every poll, whatever the listener does.
        worker.claims = OldClaims(sessions, worker.holder, settings.lease_seconds, 0, engine=engine)
    else:
        worker.listening = asyncio.Event()
        worker.listening.set()  # the listener is up: NOTIFY would wake this worker
    worker.start()
    try:
        await asyncio.sleep(1.0)  # past the first round (start-up)
        with statement_clock(engine) as took:
            await asyncio.sleep(seconds)
    finally:
        await worker.stop()
    return Idle(len(took) / seconds, 1000 * sum(took) / seconds)


async def timed(sessions: async_sessionmaker[AsyncSession], claim: Callable[..., Any]) -> float:
    async with sessions() as session:
        await session.begin()
        started = time.perf_counter()
        await claim(session)
        took = time.perf_counter() - started
        await session.rollback()  # the queue stays as it was for the next repetition
    return took


async def old_claim(session: AsyncSession) -> None:
    thread_id = await session.scalar(old_claimable_thread())
    assert thread_id is not None
    assert await session.scalar(old_oldest_queued(thread_id)) is not None


async def new_claim(session: AsyncSession) -> None:
    queue = ClaimQueueRepository(session)
    picked = await queue.pick_thread()
    assert picked.thread_id is not None
    started = await RunLeaseStatements(session).start_head(picked.thread_id, "bench", 30)
    assert started is not None


@dataclass(frozen=True, slots=True)
class ClaimFigures:
    threads: int
    claim_ms_before: float
    claim_ms_after: float
    idle_before: Idle
    idle_after: Idle


@contextlib.asynccontextmanager
async def database(server: str, threads: int) -> AsyncIterator[tuple[str, AsyncEngine]]:
    # Migrating runs its own event loop: enter and leave the database in a thread.
    with contextlib.ExitStack() as stack:
        url = await asyncio.to_thread(
            stack.enter_context, fresh_database(server, prefix="tk_claims")
        )
        try:
            await asyncio.to_thread(seed_idle_threads, url, threads)
            engine = create_engine(url, pool_size=4)
            try:
                yield url, engine
            finally:
                await engine.dispose()
        finally:
            await asyncio.to_thread(stack.close)


async def measure_size(
    server: str, threads: int, *, repeats: int, idle_seconds: float, queued: int
) -> ClaimFigures:
    async with database(server, threads) as (url, engine):
        sessions = create_session_factory(engine)
        idle_before = await idle_worker(engine, sessions, old=True, seconds=idle_seconds)
        idle_after = await idle_worker(engine, sessions, old=False, seconds=idle_seconds)
        await asyncio.to_thread(queue_requests, url, queued)
        before: list[float] = []
        after: list[float] = []
        for _ in range(2):  # warm up both (statement preparation, caches)
            await timed(sessions, old_claim)
            await timed(sessions, new_claim)
        for _ in range(repeats):
            before.append(await timed(sessions, old_claim))
            after.append(await timed(sessions, new_claim))
        return ClaimFigures(
            threads,
            1000 * statistics.median(before),
            1000 * statistics.median(after),
            idle_before,
            idle_after,
        )


async def measure(
    server: str,
    sizes: Sequence[int] = SIZES,
    *,
    repeats: int = 15,
    idle_seconds: float = 20.0,
    queued: int = 8,
) -> list[ClaimFigures]:
    """The figures per thread count; each size on its own fresh database."""
    return [
        await measure_size(server, n, repeats=repeats, idle_seconds=idle_seconds, queued=queued)
        for n in sizes
    ]


def _ratio(before: float, after: float) -> str:
    return f"{before / after:.1f}x" if after > 0 else "inf"


def report(figures: Sequence[ClaimFigures]) -> str:
    lines = [
        "claims (median claim = look + dispatch; idle = one worker, nothing queued)",
        f"{'threads':>8} | {'claim ms before':>15} {'after':>7} {'ratio':>7} | "
        f"{'idle db ms/s before':>19} {'after':>7} {'ratio':>7} | "
        f"{'idle stmts/s before':>19} {'after':>6}",
    ]
    for f in figures:
        lines.append(
            f"{f.threads:>8} | {f.claim_ms_before:>15.2f} {f.claim_ms_after:>7.2f} "
            f"{_ratio(f.claim_ms_before, f.claim_ms_after):>7} | "
            f"{f.idle_before.db_ms_per_s:>19.2f} {f.idle_after.db_ms_per_s:>7.3f} "
            f"{_ratio(f.idle_before.db_ms_per_s, f.idle_after.db_ms_per_s):>7} | "
            f"{f.idle_before.statements_per_s:>19.1f} {f.idle_after.statements_per_s:>6.2f}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--queued", type=int, default=8)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    figures = asyncio.run(
        measure(
            server_from_env(),
            sizes,
            repeats=args.repeats,
            idle_seconds=args.idle_seconds,
            queued=args.queued,
        )
    )
    print(report(figures))


if __name__ == "__main__":
    main()
