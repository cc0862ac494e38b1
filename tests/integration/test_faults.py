"""Fault injection against real PostgreSQL, real HTTP and real files (issue 6).

Each test breaks one thing for real (a summarizer that never answers, a Workdir that cannot be
written, a provider that answers 400 context_length_exceeded, a database backend terminated in
the middle of a transaction, a client that hangs up) and checks the promise that matters: nothing
half-written, a clear error, and a thread that stays usable.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from app.config import Settings
from app.container import Container, build_container
from app.db.urls import libpq_url
from app.main import create_app
from tests.conftest import API_KEY, AUTH, OTHER_KEY, AppFactory, AppHarness, make_settings
from tests.support.api import assert_clean_503, messages, new_thread, run_turns, seed_kb, state
from tests.support.corpus import BIG
from tests.support.live_server import serve_in_loop
from tests.support.openai_server import OpenAICompatibleServer, count_prompt_tokens
from tests.support.processes import app_process, reaped
from tests.support.summarizers import BlockingSummarizer, StalledSummarizer

pytestmark = pytest.mark.integration

#: Guard so a broken timeout fails the test instead of hanging the suite (not a timing assertion).
HANG_GUARD = 60.0


async def current_checkpoint(h: AppHarness, tid: str) -> str:
    """Id of the thread's latest checkpoint: any write to the model view changes it."""
    snap = await h.container.agent.graph.aget_state({"configurable": {"thread_id": tid}})
    return str(snap.config["configurable"]["checkpoint_id"])


# --- summarizer timeout ---------------------------------------------------------------------------
async def test_manual_compress_summarizer_timeout_writes_nothing(app_factory: AppFactory) -> None:
    stalled = StalledSummarizer()
    async with app_factory(summarizer=stalled, summary_timeout_seconds=0.3, **BIG) as h:
        await seed_kb(h)
        tid = await new_thread(h)
        await run_turns(h, tid, ["how does a lease expire?", "what renews the heartbeat?"])
        assert stalled.calls == 0  # the threshold is far away: only the manual path summarizes
        before_state = await state(h, tid)
        before_ckpt = await current_checkpoint(h, tid)
        history = await messages(h, tid)

        resp = await asyncio.wait_for(
            h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH), HANG_GUARD
        )
        assert resp.status_code == 502, resp.text
        body = resp.json()
        assert body["error"] == "compression_failed"
        assert "TimeoutError" in body["detail"] and "nothing was written" in body["detail"]
        assert stalled.calls == 1 and stalled.cancelled == 1  # the stalled call was abandoned

        assert await current_checkpoint(h, tid) == before_ckpt
        after_state = await state(h, tid)
        assert after_state["messages"] == before_state["messages"]
        assert after_state["summary"]["present"] is False
        assert await messages(h, tid) == history
        # The lock was released and the thread is usable.
        await run_turns(h, tid, ["still answering?"])
        assert [m["content"] for m in await messages(h, tid) if m["role"] == "user"][-1] == (
            "still answering?"
        )


async def test_automatic_summary_timeout_falls_back_to_offload_only(
    app_factory: AppFactory,
) -> None:
    stalled = StalledSummarizer()
    async with app_factory(
        summarizer=stalled,
        summary_timeout_seconds=0.3,
        summary_threshold=600,
        tool_result_preview_tokens=300,
        summary_keep_recent_tokens=200,
    ) as h:
        await seed_kb(h)
        tid = await new_thread(h)
        await asyncio.wait_for(
            run_turns(h, tid, ["how does a lease expire?", "what renews the heartbeat?"]),
            HANG_GUARD,
        )
        # The summarizer was really asked (over threshold after offloading) and timed out.
        assert stalled.calls >= 1 and stalled.cancelled == stalled.calls

        st = await state(h, tid)
        assert st["summary"]["present"] is False
        assert not any(m["is_summary"] for m in st["messages"])
        # The fallback view (offload-only) was used and persisted: previews, no lost turn.
        assert any(m["offload"] for m in st["messages"])
        users = [m["content"] for m in st["messages"] if m["type"] == "human"]
        assert users == ["how does a lease expire?", "what renews the heartbeat?"]

        runs = await h.run_ids(tid)
        events = [e for r in runs for e in await h.sse_events(r)]
        compression = [e["data"] for e in events if e["event"] == "compression"]
        assert compression and all(e["summarized"] is False for e in compression)
        assert all(e["reason"] == "threshold" for e in compression)
        # The full record never holds a preview.
        for m in await messages(h, tid):
            if m["role"] == "tool" and m["tool_name"] == "query_kb":
                payload = json.loads(m["content"])
                assert payload["count"] == len(payload["results"]) >= 1


# --- Workdir unusable -------------------------------------------------------------------------------
UNWRITABLE = {
    "summary_threshold": 600,
    "tool_result_preview_tokens": 300,
    # Large, but capped at run time: a summary always leaves room for a turn under the threshold
    # (with one turn there is nothing older to summarize: only offloading could help).
    "summary_keep_recent_tokens": 1_000_000,
}


def assert_full_view(st: dict[str, Any], history: list[dict[str, Any]]) -> None:
    """Every tool result in the model view is the full original: no preview, no truncation."""
    full = {m["tool_call_id"]: m["content"] for m in history if m["role"] == "tool"}
    view_tools = [m for m in st["messages"] if m["type"] == "tool"]
    assert view_tools and len(view_tools) == len(full)
    for m in view_tools:
        assert m["offload"] is None
        assert m["content"] == full[m["tool_call_id"]]
        json.loads(m["content"])  # still the complete JSON document


async def test_workdir_blocked_keeps_full_results_and_runs_complete(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    """A regular file sits where the thread's folder must be created (works even as root)."""
    async with app_factory(**UNWRITABLE) as h:
        await seed_kb(h)
        tid = await new_thread(h)
        blocker = h.container.settings.workdir.workdir_path / tid
        blocker.write_text("not a directory")
        # One turn: nothing older than it to summarize, so only offloading could help.
        await run_turns(h, tid, ["how does a lease expire?"])

        st = await state(h, tid)
        # Over the threshold: the middleware had to act and could not offload.
        assert st["context"]["input_tokens"] >= UNWRITABLE["summary_threshold"]
        assert st["summary"]["present"] is False
        assert_full_view(st, await messages(h, tid))
        assert blocker.read_text() == "not a directory"

        # The operator sees why nothing was offloaded: the compression events say so.
        events = [e for r in await h.run_ids(tid) for e in await h.sse_events(r)]
        compression = [e["data"] for e in events if e["event"] == "compression"]
        assert compression, events
        for e in compression:
            assert e["offloaded"] == 0 and e["offload_failed"] >= 1
            assert e["offload_error"] == "workdir_unavailable: EEXIST (File exists)"
            # And that the turn alone stays over the threshold (no silent over-budget call).
            assert e["over_threshold"] == "turn_alone_exceeds" and e["summarized"] is False

        # Manual compression: offloading was needed and failed. Not "history too short" (422),
        # but 507 workdir_unavailable, and nothing is written.
        ckpt = await current_checkpoint(h, tid)
        resp = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert resp.status_code == 507, resp.text
        assert resp.json()["error"] == "workdir_unavailable"
        assert "could not be written (EEXIST" in resp.json()["detail"]
        assert str(h.container.settings.workdir.workdir_path) not in resp.json()["detail"]
        assert await current_checkpoint(h, tid) == ckpt
        assert_full_view(await state(h, tid), await messages(h, tid))


async def test_workdir_blocked_summary_states_why_nothing_was_offloaded(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    """When summarizing can still bring the request under the threshold, it does, and the
    summary records that the large results could not be offloaded (and why)."""
    async with app_factory(**{**UNWRITABLE, "summary_keep_recent_tokens": 200}) as h:
        await seed_kb(h)
        tid = await new_thread(h)
        (h.container.settings.workdir.workdir_path / tid).write_text("not a directory")
        await run_turns(h, tid, ["how does a lease expire?", "what renews the heartbeat?"])

        st = await state(h, tid)
        assert st["summary"]["present"] is True
        assert not any(m["offload"] for m in st["messages"])
        agent = h.container.agent
        snap = await agent.graph.aget_state(agent.config_for(tid))
        summary = snap.values["messages"][0]
        assert summary.additional_kwargs["threadkeeper"]["offload_failed"]["reason"] == (
            "EEXIST (File exists)"
        )
        events = [e for r in await h.run_ids(tid) for e in await h.sse_events(r)]
        summarized = [
            e["data"] for e in events if e["event"] == "compression" and e["data"]["summarized"]
        ]
        assert summarized and all(e["offload_failed"] >= 1 for e in summarized)


@pytest.mark.slow  # a real process
async def test_workdir_full_in_a_worker_process_keeps_full_results(
    app_factory: AppFactory, clean_db: str, tmp_path: Path
) -> None:
    """A separate worker process whose file writes fail after 512 bytes (``ulimit -f 1``, with
    SIGXFSZ ignored, so writes fail with EFBIG like a full disk): no truncated file, no preview."""
    workdir = tmp_path / "workdir"
    env = {
        "DATABASE_URL": clean_db,
        "THREADKEEPER_WORKDIR_ROOT": str(workdir),
        "THREADKEEPER_API_KEYS": f"alice:{API_KEY},bob:{OTHER_KEY}",
        "THREADKEEPER_LOG_LEVEL": "WARNING",
        "THREADKEEPER_LOG_JSON": "true",
        "THREADKEEPER_WORKER_POLL_SECONDS": "0.1",
        # The process refuses a budget that cannot fit a turn (UNWRITABLE's 600): one the start
        # check accepts, which one turn's results (BIG_DOC) still exceed, with nothing older to
        # summarize, so only offloading could help.
        "THREADKEEPER_SUMMARY_THRESHOLD": "1500",
        "THREADKEEPER_TOOL_RESULT_PREVIEW_TOKENS": "300",
        "THREADKEEPER_SUMMARY_KEEP_RECENT_TOKENS": "100",
        "THREADKEEPER_SUMMARY_MAX_TOKENS": "100",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    async with app_factory(start_worker=False, **UNWRITABLE) as h:
        await seed_kb(h)
        tid = await new_thread(h)
        await h.client.post(
            f"/v1/threads/{tid}/messages",
            json={"content": "how does a lease expire?"},
            headers=AUTH,
        )
        # Its stderr goes to a pipe: a log file would fall under the same file size limit.
        proc = app_process(["worker"], env, None, shell_prefix="trap '' XFSZ; ulimit -f 1")
        with reaped(proc):
            run = await h.wait_for_run(tid, statuses={"completed", "failed"}, timeout=180)
            proc.terminate()
            _, err = await asyncio.to_thread(proc.communicate, timeout=30)
        assert run["status"] == "completed", run["error"]
        stderr = err.decode(errors="replace")
        assert "workdir_offload_failed" in stderr and "File too large" in stderr, stderr[-2000:]

        # The offload was attempted (its folder exists) but left no file behind, partial or not.
        results_dir = workdir / tid / "tool-results"
        assert results_dir.is_dir()
        assert list(results_dir.iterdir()) == []
        st = await state(h, tid)
        assert st["context"]["input_tokens"] >= UNWRITABLE["summary_threshold"]
        assert_full_view(st, await messages(h, tid))


# --- provider overflow ------------------------------------------------------------------------------
async def test_provider_overflow_in_a_live_run_retries_smaller(app_factory: AppFactory) -> None:
    window = 1200
    with OpenAICompatibleServer(context_window=window) as srv:
        async with app_factory(
            llm_base_url=srv.base_url,
            llm_api_key="k",
            summary_threshold=1_000_000,  # only the provider's 400 can trigger compression
            tool_result_preview_tokens=300,
        ) as h:
            await seed_kb(h)
            srv.enqueue_tool_call("query_kb", {"query": "lease heartbeat expires"})
            srv.enqueue_text("Leases expire without heartbeats.")
            tid = await new_thread(h)
            await run_turns(h, tid, ["explain lease expiry"])

            reqs = srv.requests
            assert len(reqs) == 3, [count_prompt_tokens(r["messages"]) for r in reqs]
            sizes = [count_prompt_tokens(r["messages"]) for r in reqs]
            assert sizes[0] <= window < sizes[1]  # the second call really overflowed
            assert sizes[2] < sizes[1] and sizes[2] <= window  # the retry is strictly smaller
            retried_tool = next(m for m in reqs[2]["messages"] if m["role"] == "tool")
            assert "tool-results/" in retried_tool["content"]

            [run_id] = await h.run_ids(tid)
            events = await h.sse_events(run_id)
            overflow = [e["data"] for e in events if e["event"] == "compression"]
            assert [e["reason"] for e in overflow] == ["overflow"]
            assert overflow[0]["after_tokens"] < overflow[0]["before_tokens"]
            assert events[-1]["data"]["status"] == "completed"

            history = await messages(h, tid)
            assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
            original_tool = next(m for m in reqs[1]["messages"] if m["role"] == "tool")
            assert history[2]["content"] == original_tool["content"]  # full, never the preview
            payload = json.loads(history[2]["content"])
            assert payload["count"] == len(payload["results"]) >= 1
            assert history[3]["content"] == "Leases expire without heartbeats."


# --- database connection lost mid-request -------------------------------------------------------------
def _admin(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(libpq_url(url), autocommit=True)


def _lock_holders(url: str) -> list[int]:
    """Backends (other than ours) holding a row lock on ``conversations`` in an open transaction."""
    with _admin(url) as conn:
        rows = conn.execute(
            "SELECT DISTINCT l.pid FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE c.relname = 'conversations' AND l.mode = 'RowShareLock' "
            "AND a.datname = current_database() AND l.pid <> pg_backend_pid()"
        ).fetchall()
    return [r[0] for r in rows]


def _terminate(url: str, pid: int) -> None:
    with _admin(url) as conn:
        (ok,) = conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()  # type: ignore[misc]
    assert ok


async def test_db_connection_lost_during_compress_writes_nothing(
    app_factory: AppFactory, clean_db: str
) -> None:
    summarizer = BlockingSummarizer()
    async with app_factory(summarizer=summarizer, **BIG) as h:
        await seed_kb(h)
        tid = await new_thread(h)
        await run_turns(h, tid, ["how does a lease expire?", "what renews the heartbeat?"])
        await h.container.worker.stop()  # nothing else may hold conversation locks now
        before_ckpt = await current_checkpoint(h, tid)
        before_view = (await state(h, tid))["messages"]
        history = await messages(h, tid)

        compress = asyncio.create_task(
            h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        )
        await asyncio.wait_for(summarizer.entered.wait(), HANG_GUARD)
        holders = await asyncio.to_thread(_lock_holders, clean_db)
        assert len(holders) == 1, holders
        await asyncio.to_thread(_terminate, clean_db, holders[0])
        summarizer.release.set()
        resp = await asyncio.wait_for(compress, HANG_GUARD)

        assert_clean_503(resp)
        # Nothing was written without the lock: same checkpoint, same view, same history.
        assert await current_checkpoint(h, tid) == before_ckpt
        assert (await state(h, tid))["messages"] == before_view
        assert await messages(h, tid) == history

        # The pool replaced the dead connection: the next requests succeed.
        again = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert again.status_code == 200, again.text
        assert (await state(h, tid))["summary"]["present"] is True
        h.container.worker.start()
        await run_turns(h, tid, ["and after the reconnect?"])


async def test_db_connection_lost_during_intake_rolls_back(
    app_factory: AppFactory, clean_db: str
) -> None:
    """The intake backend dies after inserting the user message, before its run request."""
    async with app_factory(lock_timeout_ms=30_000) as h:
        tid = await new_thread(h)
        await run_turns(h, tid, ["first question"])
        blocker = await asyncio.to_thread(_admin, clean_db)
        try:
            # SHARE conflicts with the ROW EXCLUSIVE an INSERT needs: intake waits right there,
            # with its message row already inserted in the open transaction.
            blocker.execute("BEGIN")
            blocker.execute("LOCK TABLE agent_run_requests IN SHARE MODE")
            post = asyncio.create_task(
                h.client.post(
                    f"/v1/threads/{tid}/messages", json={"content": "lost message"}, headers=AUTH
                )
            )
            pid = await _wait_for_blocked_insert(clean_db)
            await asyncio.to_thread(_terminate, clean_db, pid)
            resp = await asyncio.wait_for(post, HANG_GUARD)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert_clean_503(resp)

        with _admin(clean_db) as conn:
            (lost,) = conn.execute(  # type: ignore[misc]
                "SELECT count(*) FROM messages WHERE content = 'lost message'"
            ).fetchone()
            (orphans,) = conn.execute(  # type: ignore[misc]
                "SELECT count(*) FROM messages m WHERE m.role = 'user' AND NOT EXISTS ("
                "SELECT 1 FROM agent_run_requests r WHERE r.payload->>'message_id' = m.id::text)"
            ).fetchone()
        assert lost == 0 and orphans == 0  # rolled back: no message without its request

        # The thread and the pool recovered: the retry is accepted and answered.
        await run_turns(h, tid, ["lost message"])
        users = [m["content"] for m in await messages(h, tid) if m["role"] == "user"]
        assert users == ["first question", "lost message"]


async def _wait_for_blocked_insert(url: str) -> int:
    def find() -> int | None:
        with _admin(url) as conn:
            row = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND query ILIKE '%INSERT INTO agent_run_requests%'"
            ).fetchone()
        return row[0] if row else None

    for _ in range(600):
        pid = await asyncio.to_thread(find)
        if pid is not None:
            return pid
        await asyncio.sleep(0.05)
    raise AssertionError("intake never blocked on the run-request insert")


# --- client disconnect during CompressContext ---------------------------------------------------------
async def test_client_disconnect_during_compress_leaves_a_consistent_thread(
    clean_db: str, tmp_path: Path
) -> None:
    summarizer = BlockingSummarizer()
    settings = make_settings(clean_db, tmp_path / "workdir", lock_timeout_ms=30_000, **BIG)

    async def container_factory(s: Settings) -> Container:
        return await build_container(s, summarizer=summarizer, start_worker=True)

    app = create_app(settings, container_factory=container_factory)
    async with serve_in_loop(app) as base_url, httpx.AsyncClient(
        base_url=base_url, timeout=60
    ) as api:
        h = AppHarness(app, api)
        await seed_kb(h)
        tid = await new_thread(h)
        await run_turns(h, tid, ["how does a lease expire?", "what renews the heartbeat?"])
        before = (await state(h, tid))["messages"]
        history = await messages(h, tid)

        # A separate client (its own TCP connection) starts the compress and hangs up.
        impatient = httpx.AsyncClient(base_url=base_url)
        compress = asyncio.create_task(
            impatient.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        )
        await asyncio.wait_for(summarizer.entered.wait(), HANG_GUARD)
        compress.cancel()
        with pytest.raises(asyncio.CancelledError):
            await compress
        await impatient.aclose()
        summarizer.release.set()

        # The lock is released whatever the server did with the abandoned request: this post
        # waits for it (lock_timeout 30 s) and is accepted.
        earlier = set(await h.run_ids(tid))
        posted = await api.post(
            f"/v1/threads/{tid}/messages", json={"content": "after the hang-up"}, headers=AUTH
        )
        assert posted.status_code == 202, posted.text
        run = await h.wait_for_run(tid, statuses={"completed", "failed"}, exclude=earlier)
        assert run["status"] == "completed", run["error"]

        # Never partial: either untouched, or summary + a verbatim suffix of the old view.
        after = (await state(h, tid))["messages"]
        new_turn = next(i for i, m in enumerate(after) if m["content"] == "after the hang-up")
        prior = after[:new_turn]
        if prior[0]["is_summary"]:
            kept = prior[1:]
            assert kept and [m["id"] for m in kept] == [m["id"] for m in before[-len(kept) :]]
            assert summarizer.calls == 1
        else:
            assert [m["id"] for m in prior] == [m["id"] for m in before]
        # The full record is untouched by either outcome.
        assert (await messages(h, tid))[: len(history)] == history
