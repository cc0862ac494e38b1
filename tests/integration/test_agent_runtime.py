"""Agent runtime end to end: intake -> worker -> graph -> persisted messages, on real PostgreSQL."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import psycopg
import pytest

from app.db.run_events import DeltaEvent
from app.db.urls import libpq_url
from app.repositories.run_events import RunEventRepository
from tests.support.api import add_doc, messages, new_thread
from tests.support.app_harness import AUTH, AppFactory

pytestmark = pytest.mark.integration


async def test_offline_turn_calls_query_kb_and_cites_ids(app_factory: AppFactory) -> None:
    async with app_factory() as h:
        await add_doc(h)
        search = await h.client.get(
            "/v1/knowledge-bases/default/search", params={"q": "lease heartbeat"}, headers=AUTH
        )
        hits = search.json()["results"]
        assert search.json()["count"] == len(hits) >= 1
        tid = await new_thread(h)
        posted = await h.client.post(
            f"/v1/threads/{tid}/messages",
            json={"content": "What happens when a lease expires?"},
            headers=AUTH,
        )
        assert posted.status_code == 202 and posted.json()["status"] == "queued"
        run = await h.wait_for_run(tid, statuses={"completed", "failed"})
        assert run["status"] == "completed", run
        assert run["model_calls"] == 2 and run["input_tokens"] > 0 and run["output_tokens"] > 0

        history = await messages(h, tid)
        roles = [m["role"] for m in history]
        assert roles == ["user", "assistant", "tool", "assistant"]
        assert [m["seq"] for m in history] == sorted(m["seq"] for m in history)
        assert history[1]["tool_calls"][0]["name"] == "query_kb"
        tool_payload = json.loads(history[2]["content"])
        assert tool_payload["count"] >= 1
        cited = {r["id"] for r in tool_payload["results"]}
        answer = history[3]["content"]
        assert any(f"[kb:{cid}]" in answer for cid in cited), answer
        assert "lease" in answer.lower()

        # SSE replays the whole run and ends on the final status.
        events = await h.sse_events(run["id"])
        types = [e["event"] for e in events]
        assert types[0] == "status" and types[-1] == "status"
        assert types.count("message") == 3
        # Token deltas stream before the final answer; joined, they are exactly that answer.
        deltas = [e["data"] for e in events if e["event"] == "delta"]
        assert deltas, types
        assert "".join(d["text"] for d in deltas) == answer
        assert events[-1]["data"]["status"] == "completed"
        # Resuming from the middle yields only the later events.
        mid = events[1]["id"]
        later = await h.sse_events(run["id"], last_event_id=mid)
        assert later == events[2:]
        assert [e["event"] for e in later].count("message") == 2


async def test_fifo_order_under_concurrent_posts(app_factory: AppFactory) -> None:
    async with app_factory() as h:
        await add_doc(h)
        tid = await new_thread(h)
        texts = [f"question number {i} about the lease" for i in range(8)]

        async def post(text: str) -> dict[str, Any]:
            resp = await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": text}, headers=AUTH
            )
            assert resp.status_code == 202, resp.text
            return resp.json()  # type: ignore[no-any-return]

        accepted = await asyncio.gather(*(post(t) for t in texts))
        assert len({a["request_id"] for a in accepted}) == 8
        deadline = asyncio.get_running_loop().time() + 180  # a hang guard, not a timing check
        while True:
            runs = (await h.client.get(f"/v1/threads/{tid}/runs", headers=AUTH)).json()["items"]
            if len(runs) == 8 and all(r["status"] == "completed" for r in runs):
                break
            assert asyncio.get_running_loop().time() < deadline, runs
            await asyncio.sleep(0.1)
        history = await messages(h, tid)
        users = [m for m in history if m["role"] == "user"]
        # The order the thread saw the posts (seq) is the order the runs answered them.
        run_order = sorted(runs, key=lambda r: r["started_at"])
        req_to_user = {a["request_id"]: a["message_id"] for a in accepted}
        user_seq = {m["id"]: m["seq"] for m in users}
        started_seqs = [user_seq[req_to_user[r["request_id"]]] for r in run_order]
        assert started_seqs == sorted(started_seqs)
        # Each run's answer follows its own question: no interleaving between runs.
        by_run: dict[str, list[int]] = {}
        for m in history:
            if m["run_id"]:
                by_run.setdefault(m["run_id"], []).append(m["seq"])
        spans = sorted((min(s), max(s)) for s in by_run.values())
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end < start
        assert len(history) == 8 * 4
        # Each question names its request; the run of that request answers it, after it.
        run_by_request = {r["request_id"]: r["id"] for r in runs}
        for question in users:
            answered_by = run_by_request[question["request_id"]]
            answers = [m for m in history if m["run_id"] == answered_by]
            assert [m["role"] for m in answers] == ["assistant", "tool", "assistant"]
            assert all(question["seq"] < a["seq"] for a in answers)


async def test_completed_turns_keep_only_their_turn_boundaries(
    app_factory: AppFactory, clean_db: str
) -> None:
    async with app_factory() as h:
        await add_doc(h)
        tid = await new_thread(h)
        done: set[str] = set()
        for text in ("lease?", "heartbeat?", "compression?"):
            await h.client.post(f"/v1/threads/{tid}/messages", json={"content": text}, headers=AUTH)
            run = await h.wait_for_run(tid, statuses={"completed", "failed"}, exclude=done)
            assert run["status"] == "completed"
            done.add(run["id"])
        with psycopg.connect(libpq_url(clean_db)) as conn:
            (count,) = conn.execute(
                "SELECT count(*) FROM checkpoints WHERE thread_id = %s", (tid,)
            ).fetchone()  # type: ignore[misc]
        # Per turn (model, tools, model): before its input, its input applied, its end (issue
        # 36: what a client branches from); the two steps in between are pruned.
        assert count == 3 * 3
        # ...and the state is intact: all three turns are still in the model view.
        state = (await h.client.get(f"/v1/threads/{tid}/agent-state", headers=AUTH)).json()
        humans = [m["content"] for m in state["messages"] if m["type"] == "human"]
        assert humans == ["lease?", "heartbeat?", "compression?"]


async def test_event_notifications_wake_only_their_run(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        notifier = h.container.notifier
        await asyncio.wait_for(notifier.connected.wait(), 30)
        claimed = []
        for text in ("one", "two"):
            tid = await new_thread(h)
            await h.client.post(f"/v1/threads/{tid}/messages", json={"content": text}, headers=AUTH)
            run = await h.container.worker.claim_next()
            assert run is not None
            claimed.append(run.run_id)
        # The claims' own notifications may still be in flight: let them land first.
        await asyncio.gather(*(notifier.wait(r, timeout=1.0) for r in claimed))
        first = asyncio.create_task(notifier.wait(claimed[0], timeout=60))
        second = asyncio.create_task(notifier.wait(claimed[1], timeout=0.5))
        await asyncio.sleep(0.1)
        async with h.container.sessions() as session, session.begin():
            await RunEventRepository(session).append(
                claimed[0], DeltaEvent(type="delta", text="probe")
            )
            await asyncio.sleep(0.1)
            assert not first.done()  # NOTIFY is delivered on commit, not before
        assert await first is True
        assert await second is False  # the other run's stream was not woken
