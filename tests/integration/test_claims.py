"""Issue 23 item 1: claims come from the queue of requests, not from a scan of the threads.

FIFO within a thread, fair turns across threads, two workers claiming at once (SKIP LOCKED: no
double claim, no waiting on a thread another transaction holds), and an idle worker that sends
no statement at all between wake-ups. The worker loop is off except in the last test: the
tests call the worker's own claim.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from app.db.models import RunStatus
from app.db.urls import libpq_url
from app.repositories.run_leases import RunLeaseStatements
from app.repositories.runs import RunRepository
from app.worker.claims import ClaimedRun, RunClaims
from app.worker.engine import NOTIFY_GRACE_SECONDS
from app.worker.errors import CANCELLED, LEASE_EXPIRED
from tests.support.api import new_thread
from tests.support.app_harness import AUTH, AppFactory, AppHarness
from tests.support.statements import sent_statements

pytestmark = pytest.mark.integration


async def post(h: AppHarness, tid: str, content: str) -> str:
    resp = await h.client.post(
        f"/v1/threads/{tid}/messages", json={"content": content}, headers=AUTH
    )
    assert resp.status_code == 202, resp.text
    return resp.json()["request_id"]  # type: ignore[no-any-return]


async def complete(h: AppHarness, claimed: ClaimedRun) -> None:
    """End the run as its worker would after a turn."""
    async with h.container.sessions() as session, session.begin():
        run = await RunRepository(session).get(claimed.run_id)
        assert run is not None and run.lease_holder is not None
        written = await RunLeaseStatements(session).finish(
            claimed.run_id, run.lease_holder, RunStatus.COMPLETED, cancel_error=CANCELLED
        )
        assert written == RunStatus.COMPLETED


def content_of(claimed: ClaimedRun) -> str:
    return str(claimed.graph_input["messages"][0].content)


async def test_a_thread_s_requests_are_claimed_in_order_one_run_at_a_time(
    app_factory: AppFactory,
) -> None:
    async with app_factory(start_worker=False) as h:
        tid = await new_thread(h)
        for n in range(3):
            await post(h, tid, f"m{n}")
        worker = h.container.worker
        taken = []
        for _ in range(3):
            claimed = await worker.claim_next()
            assert claimed is not None
            # One run per thread: the next input waits for this run to end.
            assert await worker.claim_next() is None
            taken.append(content_of(claimed))
            await complete(h, claimed)
        assert taken == ["m0", "m1", "m2"]
        assert await worker.claim_next() is None


async def test_new_input_looks_for_dangling_tool_calls_unless_the_last_run_completed(
    app_factory: AppFactory,
) -> None:
    """The repair's checkpoint read is skipped only after a completed run (the graph reached
    its end: no tool call can be left without a result); after a failed run, and on a thread
    with no run yet, the claim asks for it."""
    async with app_factory(start_worker=False) as h:
        tid = await new_thread(h)
        for n in range(3):
            await post(h, tid, f"m{n}")
        worker = h.container.worker
        first = await worker.claim_next()
        assert first is not None and first.repair
        async with h.container.sessions() as session, session.begin():
            await RunLeaseStatements(session).fail(first.run_id, LEASE_EXPIRED)
        second = await worker.claim_next()
        assert second is not None and second.repair
        await complete(h, second)
        third = await worker.claim_next()
        assert third is not None and not third.repair
        assert content_of(third) == "m2"


async def test_a_run_handed_back_is_looked_for_once_a_look_at_the_queue_sees_one(
    app_factory: AppFactory,
) -> None:
    """The claim loop skips the look for runs handed back while none wait; the look at the
    queue says when one does (here: released as a draining worker releases it)."""
    async with app_factory(start_worker=False) as h:
        tid = await new_thread(h)
        await post(h, tid, "m0")
        worker = h.container.worker
        claimed = await worker.claim_next()
        assert claimed is not None
        assert await worker.claims.claim_resumable() is None
        assert not worker.claims.handed_back
        await worker.release(claimed)
        assert await worker.claim_next() is None  # nothing new to start: the run is active
        assert worker.claims.handed_back
        taken = await worker.claims.claim_resumable()
        assert taken is not None and taken.run_id == claimed.run_id


async def test_a_long_queue_takes_turns_with_other_threads(app_factory: AppFactory) -> None:
    """Thread A queues five inputs before B and C queue one each. After A's first turn, B and
    C (ready since they posted) go before A's second input (ready when A's turn ended). The
    old claim ordered threads by their oldest queued input and ran all of A's first."""
    async with app_factory(start_worker=False) as h:
        a, b, c = [await new_thread(h) for _ in range(3)]
        for n in range(5):
            await post(h, a, f"a{n}")
        await post(h, b, "b0")
        await post(h, c, "c0")
        worker = h.container.worker
        order = []
        while (claimed := await worker.claim_next()) is not None:
            order.append(content_of(claimed))
            await complete(h, claimed)
        assert order == ["a0", "b0", "c0", "a1", "a2", "a3", "a4"]


async def test_a_thread_held_by_another_transaction_is_skipped_not_waited_for(
    app_factory: AppFactory, clean_db: str
) -> None:
    async with app_factory(start_worker=False) as h:
        first, second = await new_thread(h), await new_thread(h)
        await post(h, first, "first")
        await post(h, second, "second")
        worker = h.container.worker
        with psycopg.connect(libpq_url(clean_db)) as other:
            # Another transaction (intake, compress, a claim) holds the first thread's lock.
            other.execute("SELECT 1 FROM conversations WHERE id = %s FOR UPDATE", (first,))
            claimed = await asyncio.wait_for(worker.claim_next(), 60)
            assert claimed is not None and str(claimed.thread_id) == second
            # Only the held thread is left: nothing claimed, nothing waited for, and the loop
            # is told to look again soon (no notification comes when the lock is let go).
            assert await asyncio.wait_for(worker.claim_next(), 60) is None
            assert worker.claims.contended
            other.rollback()
        claimed = await worker.claim_next()
        assert claimed is not None and str(claimed.thread_id) == first
        assert not worker.claims.contended


async def test_two_workers_claiming_at_once_never_take_the_same_thread(
    app_factory: AppFactory, clean_db: str
) -> None:
    threads, per_thread = 12, 2
    async with app_factory(start_worker=False) as h:
        for t in range(threads):
            tid = await new_thread(h)
            for n in range(per_thread):
                await post(h, tid, f"t{t}m{n}")
        settings = h.container.settings.worker
        workers = [
            RunClaims(
                h.container.sessions,
                holder,
                settings.lease_seconds,
                0,
                engine=h.container.engine,
            )
            for holder in ("worker-a", "worker-b")
        ]
        claimed: list[ClaimedRun] = []
        while True:
            # Both claim at the same moment, as many times as there are threads.
            rounds = await asyncio.gather(
                *(w.claim_next() for w in workers for _ in range(threads // 2))
            )
            got = [c for c in rounds if c is not None]
            if not got and not any(w.contended for w in workers):
                break
            # One run per thread at a time: no two runs of this round share a thread.
            assert len({c.thread_id for c in got}) == len(got), got
            claimed += got
            for c in got:
                await complete(h, c)
    assert len(claimed) == threads * per_thread
    assert len({content_of(c) for c in claimed}) == threads * per_thread  # none twice
    with psycopg.connect(libpq_url(clean_db)) as conn:
        rows = conn.execute(
            "SELECT r.status::text, count(a.id) FROM agent_run_requests r "
            "LEFT JOIN agent_runs a ON a.request_id = r.id GROUP BY r.id"
        ).fetchall()
    assert rows and all(status == "dispatched" and runs == 1 for status, runs in rows), rows


async def test_an_idle_worker_sends_no_statement_until_woken(app_factory: AppFactory) -> None:
    """The old loop claimed every ``worker_poll_seconds`` (0.05 s here) whether or not anything
    was queued. Now, with the listener up, nothing is sent until a notification wakes it."""
    async with app_factory(worker_idle_poll_seconds=3600.0) as h:
        await asyncio.wait_for(h.container.notifier.connected.wait(), 60)
        with sent_statements(h.container.engine) as sent:
            await settle(sent)
            sent.clear()
            await asyncio.sleep(3)
            assert sent == [], sent

            # Woken by the message: the turn runs, then the worker goes quiet again.
            tid = await new_thread(h)
            await post(h, tid, "hello")
            run = await h.wait_for_run(tid, statuses={"completed", "failed"}, timeout=60)
            assert run["status"] == "completed", run
            await settle(sent)
            sent.clear()
            await asyncio.sleep(3)
            assert sent == [], sent


async def settle(sent: list[Any], rounds: int = 40) -> None:
    """Until no statement went out for a second (start-up and the first rounds are over); a
    worker that polls never lets it settle, and the assertion after it fails."""
    for _ in range(rounds):
        before = len(sent)
        await asyncio.sleep(1.0)
        if len(sent) == before:
            return


async def test_a_look_that_took_the_only_ready_thread_is_not_followed_by_another(
    app_factory: AppFactory,
) -> None:
    """A claim round used to end with a look that found nothing (a third of a turn's claim
    statements); now a look that saw no other ready thread ends the round, and one that saw
    more asks for another look."""
    async with app_factory(start_worker=False) as h:
        a, b = await new_thread(h), await new_thread(h)
        await post(h, a, "a0")
        await post(h, b, "b0")
        claims = h.container.worker.claims
        assert await claims.claim_resumable() is None  # the loop's first look: none handed back
        assert await claims.claim_next() is not None
        assert claims.more_ready  # b was ready too
        assert await claims.claim_next() is not None
        assert not claims.more_ready  # b was the only one left


async def test_the_claim_loop_looks_once_for_a_lone_message(app_factory: AppFactory) -> None:
    """The loop at work (no other thread, no lease that could expire meanwhile): one look
    claims the run, and none follows until the run's end wakes the loop. (The API process's
    own worker is woken by intake's NOTIFY alone while its listener is up: a second, direct
    wake-up raced it into another look.)"""
    async with app_factory(worker_idle_poll_seconds=3600.0) as h:
        await asyncio.wait_for(h.container.notifier.connected.wait(), 60)
        with sent_statements(h.container.engine) as sent:
            await settle(sent)
            sent.clear()
            tid = await new_thread(h)
            await post(h, tid, "hello")
            run = await h.wait_for_run(tid, statuses={"completed", "failed"}, timeout=60)
            assert run["status"] == "completed", run
            await settle(sent)
        firsts = [s.lstrip().split("\n", 1)[0] for s, _ in sent]
        start = firsts.index(
            "-- run start: UPDATE agent_run_requests; INSERT INTO agent_runs, run_events"
        )
        finish = firsts.index("-- run finish: UPDATE agent_runs; INSERT INTO run_events")
        # The look that claimed the run (just before its start) saw no other ready thread: no
        # look follows until the run's end wakes the loop (its thread may have input queued).
        assert "WITH heads AS MATERIALIZED (" in firsts[:start], firsts
        assert "WITH heads AS MATERIALIZED (" not in firsts[start:finish], firsts


async def test_input_queued_here_wakes_the_loop_by_notification_or_late(
    app_factory: AppFactory,
) -> None:
    """While the listener is up, intake's NOTIFY wakes the API process's own worker; it is
    woken directly only if no notification came within the grace period (a listener whose
    connection died unnoticed), and at once while the listener is down."""
    async with app_factory(start_worker=False) as h:
        worker = h.container.worker
        wake = worker._wake
        listening = asyncio.Event()
        listening.set()
        worker.listening = listening

        worker.enqueued()
        assert not wake.is_set()
        worker.notified()  # the NOTIFY arrives
        assert wake.is_set()
        wake.clear()
        await asyncio.sleep(NOTIFY_GRACE_SECONDS + 0.3)
        assert not wake.is_set()  # no second wake-up

        worker.enqueued()  # no NOTIFY comes
        await asyncio.sleep(NOTIFY_GRACE_SECONDS + 0.3)
        assert wake.is_set()
        wake.clear()

        listening.clear()  # the listener is down
        worker.enqueued()
        assert wake.is_set()
