"""``manual_compression.available`` (GetAgentState) is true exactly when CompressContext would do
something (issue 19 item 2): compared with the call's outcome on every state built here, and
the reproduction (turn alone over a tight threshold) says so in its compression events."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.api import new_thread, run_turns, seed_kb, state
from tests.support.app_harness import AUTH, AppFactory, AppHarness
from tests.support.corpus import BIG

pytestmark = pytest.mark.integration

#: Why the capability is off -> what CompressContext answers instead of 200.
REFUSAL = {
    "thread_busy": (409, "thread_busy"),
    "empty_history": (422, "nothing_to_compress"),
    "nothing_to_compress": (422, "nothing_to_compress"),
}


async def capability_agrees(h: AppHarness, tid: str) -> dict[str, Any]:
    """Read the capability, then call CompressContext: they must agree. Returns the state read."""
    st = await state(h, tid)
    manual = st["capabilities"]["manual_compression"]
    resp = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
    if manual["available"]:
        assert manual["reason"] is None
        assert resp.status_code == 200, (manual, resp.text)
        out = resp.json()
        assert out["summarized"] or out["offloaded"] >= 1, out
    else:
        status, code = REFUSAL[manual["reason"]]
        assert (resp.status_code, resp.json()["error"]) == (status, code), (manual, resp.text)
    return st


async def test_capability_matches_compress_context_on_every_state(app_factory: AppFactory) -> None:
    async with app_factory(**BIG) as h:
        await seed_kb(h)
        tid = await new_thread(h)
        seen = [(await capability_agrees(h, tid))["capabilities"]["manual_compression"]]
        # One turn: nothing older than the current turn, but large results to offload.
        await run_turns(h, tid, ["how does a lease expire?"])
        for _ in range(3):  # compress until nothing is left to do
            seen.append((await capability_agrees(h, tid))["capabilities"]["manual_compression"])
        await run_turns(h, tid, ["what renews the lease heartbeat?", "and when does it expire?"])
        for _ in range(3):
            seen.append((await capability_agrees(h, tid))["capabilities"]["manual_compression"])
        # A thread whose last turn has only small results: nothing to offload or summarize.
        small = await new_thread(h)
        await run_turns(h, small, ["hello there"])
        seen.append((await capability_agrees(h, small))["capabilities"]["manual_compression"])
    reasons = {m["reason"] for m in seen}
    assert {None, "empty_history", "nothing_to_compress"} <= reasons, seen


async def test_capability_is_off_while_busy(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        tid = await new_thread(h)
        await h.client.post(f"/v1/threads/{tid}/messages", json={"content": "hi"}, headers=AUTH)
        st = await capability_agrees(h, tid)
        assert st["capabilities"]["manual_compression"]["reason"] == "thread_busy"


async def test_reproduction_turn_alone_over_the_threshold_is_reported_not_looped(
    app_factory: AppFactory,
) -> None:
    """A threshold one turn alone exceeds (results kept verbatim: no offload below 3000): each
    model call summarizes at most once, the run's compression events name
    ``turn_alone_exceeds``, and GetAgentState does not offer a compression that cannot help."""
    tight = {
        "summary_threshold": 1500,
        "tool_result_preview_tokens": 3000,
        "summary_keep_recent_tokens": 100,
        "summary_max_tokens": 200,
    }
    async with app_factory(**tight) as h:
        await seed_kb(h)
        tid = await new_thread(h)
        await run_turns(h, tid, ["how does a lease expire?", "what renews the lease heartbeat?"])
        runs = await h.run_ids(tid)
        events = [
            e["data"] for r in runs for e in await h.sse_events(r) if e["event"] == "compression"
        ]
        flagged = [e for e in events if e.get("over_threshold")]
        assert flagged, events
        assert all(e["over_threshold"] == "turn_alone_exceeds" for e in flagged)
        assert all(e["threshold"] == 1500 for e in flagged)
        # At most one summary per model call, and a flagged call never summarizes twice: the
        # events either brought the view below the threshold or named the turn.
        for e in events:
            assert e["after_tokens"] < 1500 or e.get("over_threshold") == "turn_alone_exceeds", e
        st = await capability_agrees(h, tid)
        assert st["context"]["pressure"] > 1.0
        assert st["capabilities"]["manual_compression"] == {
            "available": False,
            "reason": "nothing_to_compress",
            "detail": None,
        }
