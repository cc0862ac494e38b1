"""Manual compression, agent state and automatic compression against real PostgreSQL."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from typing import Any

import pytest

from app.services.agent_state import compression_suggested
from tests.support.api import messages, new_thread, run_turns, seed_kb, state
from tests.support.app_harness import AUTH, AppFactory
from tests.support.corpus import BIG
from tests.support.openai_server import OpenAICompatibleServer
from tests.support.summarizers import BlockingSummarizer, FailingSummarizer

pytestmark = pytest.mark.integration


async def test_manual_compress_shrinks_view_and_keeps_full_history(
    app_factory: AppFactory, workdir_settings: dict[str, Any]
) -> None:
    """On both Workdir backends (local folder, S3)."""
    async with app_factory(**BIG, **workdir_settings) as h:
        await seed_kb(h)
        tid = await new_thread(h)
        await run_turns(h, tid, ["how does a lease expire?", "what renews the lease heartbeat?"])
        full_before = await messages(h, tid)
        st = await state(h, tid)
        assert st["capabilities"]["manual_compression"] == {
            "available": True,
            "reason": None,
            "detail": None,
        }
        assert st["summary"]["present"] is False
        before_tokens = st["context"]["input_tokens"]

        resp = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert resp.status_code == 200, resp.text
        out = resp.json()
        assert out["before_tokens"] == before_tokens
        assert out["after_tokens"] < out["before_tokens"]
        assert out["offloaded"] >= 1 and out["summarized"] is True

        st2 = await state(h, tid)
        assert st2["context"]["input_tokens"] == out["after_tokens"]
        assert st2["summary"]["present"] is True and st2["summary"]["summarized_messages"] >= 1
        assert st2["messages"][0]["is_summary"] is True
        assert st2["next"] == []
        # The current (last) user turn is kept verbatim.
        users = [m for m in st2["messages"] if m["type"] == "human" and not m["is_summary"]]
        assert users and users[-1]["content"] == "what renews the lease heartbeat?"
        # Offloaded previews point at files whose SHA-256 matches the full original.
        offloaded = [m for m in st2["messages"] if m["offload"]]
        for m in offloaded:
            path = m["offload"]["path"]
            f = await h.client.get(f"/v1/threads/{tid}/workdir/{path}", headers=AUTH)
            assert f.status_code == 200
            assert f.headers["x-content-sha256"] == m["offload"]["sha256"]
            assert f.headers["etag"] == f'"sha256-{m["offload"]["sha256"]}"'
            assert hashlib.sha256(f.content).hexdigest() == m["offload"]["sha256"]
            digest = base64.b64encode(hashlib.sha256(f.content).digest()).decode()
            assert f.headers["repr-digest"] == f"sha-256=:{digest}:"  # RFC 9530
            assert "digest" not in f.headers
            assert m["offload"]["sha256"] in m["content"]
            original = next(
                x
                for x in full_before
                if x["role"] == "tool" and x["tool_call_id"] == m["tool_call_id"]
            )
            assert f.text == original["content"]
        # The persisted chat is untouched by compression.
        assert await messages(h, tid) == full_before
        tool_rows = [m for m in full_before if m["role"] == "tool"]
        assert all(json.loads(t["content"])["count"] >= 1 for t in tool_rows)

        # The next turn runs on the compressed view: summary first, then the new input.
        await run_turns(h, tid, ["and after expiry?"])
        st3 = await state(h, tid)
        assert st3["messages"][0]["is_summary"] is True
        assert any(m["content"] == "and after expiry?" for m in st3["messages"])


async def test_busy_states_each_get_409(app_factory: AppFactory) -> None:
    # queued: no worker, so the request stays queued
    async with app_factory(start_worker=False) as h:
        tid = await new_thread(h)
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "hi"}, headers=AUTH)
        resp = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert resp.status_code == 409 and resp.json()["error"] == "thread_busy"
        assert "queued" in resp.json()["detail"]
        st = await state(h, tid)
        assert st["capabilities"]["manual_compression"] == {
            "available": False,
            "reason": "thread_busy",
            "detail": None,
        }
    # running: the model call is held open
    with OpenAICompatibleServer() as srv:
        srv.hold()
        async with app_factory(llm_base_url=srv.base_url, llm_api_key="k") as h:
            tid = await new_thread(h)
            await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "hi"}, headers=AUTH)
            await h.wait_for_run(tid, statuses={"running"})
            resp = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
            assert resp.status_code == 409 and "running" in resp.json()["detail"]
            srv.release()
            await h.wait_for_run(tid, statuses={"completed"})
    # interrupted: covered with resume in test_run_lifecycle; here via the state endpoint too
    async with app_factory(approval_tools="query_kb") as h:
        tid = await new_thread(h)
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "hi"}, headers=AUTH)
        await h.wait_for_run(tid, statuses={"interrupted"})
        resp = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert resp.status_code == 409 and "interrupted" in resp.json()["detail"]


async def test_nothing_to_compress_writes_nothing(app_factory: AppFactory) -> None:
    async with app_factory() as h:
        tid = await new_thread(h)
        empty = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert empty.status_code == 422 and empty.json()["error"] == "nothing_to_compress"
        await run_turns(h, tid, ["short question"])
        graph = h.container.agent.graph
        cfg = {"configurable": {"thread_id": tid}}
        before = (await graph.aget_state(cfg)).config["configurable"]["checkpoint_id"]
        resp = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert resp.status_code == 422 and resp.json()["error"] == "nothing_to_compress"
        after = (await graph.aget_state(cfg)).config["configurable"]["checkpoint_id"]
        assert after == before


async def test_summarizer_failure_writes_nothing_and_leaks_nothing(app_factory: AppFactory) -> None:
    failing = FailingSummarizer()
    async with app_factory(summarizer=failing, **BIG) as h:
        await seed_kb(h)
        tid = await new_thread(h)
        await run_turns(h, tid, ["lease expiry?", "heartbeat?"])
        cfg = {"configurable": {"thread_id": tid}}
        snap = await h.container.agent.graph.aget_state(cfg)
        resp = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert resp.status_code == 502 and resp.json()["error"] == "compression_failed"
        assert FailingSummarizer.SECRET not in resp.text
        assert failing.calls == 1
        after = await h.container.agent.graph.aget_state(cfg)
        assert (
            after.config["configurable"]["checkpoint_id"]
            == snap.config["configurable"]["checkpoint_id"]
        )
        # Thread still usable.
        await run_turns(h, tid, ["still there?"])


async def test_compress_and_post_never_interleave(
    app_factory: AppFactory, database_route: dict[str, Any]
) -> None:
    """Straight to PostgreSQL, and through PgBouncer in transaction mode (the row lock is
    held by the compression's transaction, on whichever server connection serves it)."""
    summarizer = BlockingSummarizer()
    async with app_factory(
        summarizer=summarizer, lock_timeout_ms=20_000, **BIG, **database_route
    ) as h:
        await seed_kb(h)
        tid = await new_thread(h)
        await run_turns(h, tid, ["lease expiry?", "heartbeat?"])
        before_runs = set(await h.run_ids(tid))
        compress = asyncio.create_task(
            h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        )
        await asyncio.wait_for(summarizer.entered.wait(), 10)
        post = asyncio.create_task(
            h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "racing message"}, headers=AUTH
            )
        )
        await asyncio.sleep(0.5)
        assert not post.done(), "intake must wait for the Conversation lock held by compress"
        summarizer.release.set()
        c, p = await asyncio.gather(compress, post)
        assert c.status_code == 200, c.text
        assert p.status_code == 202, p.text
        run = await h.wait_for_run(tid, statuses={"completed", "failed"}, exclude=before_runs)
        st = await state(h, tid)
        # Compression happened strictly before the new turn: summary first, racing message after it.
        assert st["messages"][0]["is_summary"] is True
        idx = [i for i, m in enumerate(st["messages"]) if m["content"] == "racing message"]
        assert idx and idx[0] > 0
        assert run["status"] == "completed"
        history = await messages(h, tid)
        assert [m["content"] for m in history if m["role"] == "user"][-1] == "racing message"


async def test_post_first_then_compress_is_refused(app_factory: AppFactory) -> None:
    summarizer = BlockingSummarizer()
    summarizer.release.set()
    async with app_factory(summarizer=summarizer, start_worker=False, **BIG) as h:
        tid = await new_thread(h)
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "x"}, headers=AUTH)
        resp = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert resp.status_code == 409
        assert summarizer.calls == 0


def test_suggestion_boundary_is_exactly_85_percent() -> None:
    assert compression_suggested(849, 1000) is False
    assert compression_suggested(850, 1000) is True
    assert compression_suggested(8499, 10000) is False
    assert compression_suggested(0, 1) is False


async def test_state_endpoint_reports_pressure_at_the_boundary(app_factory: AppFactory) -> None:
    async with app_factory() as h:
        tid = await new_thread(h)
        await run_turns(h, tid, ["a question about leases"])
        tokens = (await state(h, tid))["context"]["input_tokens"]
    at = (tokens * 100) // 85  # tokens >= 85% of this threshold
    above = at + 1  # tokens < 85% of this one
    async with app_factory(summary_threshold=at) as h:
        ctx = (await state(h, tid))["context"]
        assert ctx["input_tokens"] == tokens and ctx["summary_threshold"] == at
        assert ctx["compression_suggested"] is True
        assert ctx["pressure"] == pytest.approx(tokens / at, abs=1e-4)
    async with app_factory(summary_threshold=above) as h:
        ctx = (await state(h, tid))["context"]
        assert ctx["compression_suggested"] is False


async def test_automatic_compression_in_a_run_offloads_and_keeps_full_tool_output(
    app_factory: AppFactory,
) -> None:
    async with app_factory(
        summary_threshold=3000, tool_result_preview_tokens=300, summary_keep_recent_tokens=400
    ) as h:
        await seed_kb(h)
        tid = await new_thread(h)
        await run_turns(
            h, tid, ["how does a lease expire?", "and the heartbeat?", "when is a lease renewed?"]
        )
        events = [e for r in await h.run_ids(tid) for e in await h.sse_events(r)]
        assert any(e["event"] == "compression" for e in events)
        st = await state(h, tid)
        assert any(m["offload"] for m in st["messages"]) or st["summary"]["present"]
        assert st["context"]["input_tokens"] < 3000 + 2000
        for m in await messages(h, tid):
            if m["role"] == "tool":
                payload = json.loads(m["content"])  # full JSON, never a preview
                items = payload["results"] if m["tool_name"] == "query_kb" else payload["hits"]
                assert payload["count"] == len(items)


async def test_delete_thread_removes_checkpoints_and_workdir_files(
    app_factory: AppFactory, workdir_settings: dict[str, Any]
) -> None:
    async with app_factory(**BIG, **workdir_settings) as h:
        await seed_kb(h)
        tid = await new_thread(h)
        await run_turns(h, tid, ["lease expiry?", "heartbeat?"])
        assert (
            await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        ).status_code == 200
        workdir = h.container.workdir
        assert any(p.endswith(".txt") for p in await workdir.list_files(tid))
        cfg = {"configurable": {"thread_id": tid}}
        assert (await h.container.agent.graph.aget_state(cfg)).values["messages"]
        assert (await h.client.delete(f"/v1/threads/{tid}", headers=AUTH)).status_code == 204
        assert await workdir.list_files(tid) == []
        assert not (await h.container.agent.graph.aget_state(cfg)).values
        assert (await h.client.get(f"/v1/threads/{tid}/messages", headers=AUTH)).status_code == 404
