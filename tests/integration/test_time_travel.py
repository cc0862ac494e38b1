"""Issue 36: time travel as chat UIs use it, through the real langgraph-sdk against a served app
(the offline agent): the history of real states per turn boundary, and the state at any of them.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import ConflictError, NotFoundError, UnprocessableEntityError

from tests.support.agents_files import agents_file
from tests.support.api import add_doc
from tests.support.app_harness import API_KEY, AUTH, AppFactory
from tests.support.live_server import serve_in_loop
from tests.support.openai_server import OpenAICompatibleServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def human(text: str, message_id: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "user", "content": text}
    if message_id:
        message["id"] = message_id
    return {"messages": [message]}


def ids(state: dict[str, Any]) -> list[str]:
    return [m["id"] for m in state["values"]["messages"]]


def first_seen(history: list[dict[str, Any]], message_id: str) -> dict[str, Any]:
    """The oldest state holding the message (how Agent Chat UI finds where it appeared)."""
    return [s for s in history if message_id in ids(s)][-1]


async def two_turns(client: Any) -> str:
    tid = (await client.threads.create())["thread_id"]
    await client.runs.wait(tid, "default", input=human("When does a lease expire?", "q1"))
    await client.runs.wait(tid, "default", input=human("And what renews it?", "q2"))
    return str(tid)


async def test_history_has_every_turn_boundary_newest_first(app_factory: AppFactory) -> None:
    async with app_factory() as h, serve_in_loop(h.app) as url:
        await add_doc(h)
        client = get_client(url=url, api_key=API_KEY)
        tid = await two_turns(client)
        state = await client.threads.get_state(tid)
        history = await client.threads.get_history(tid, limit=100)
        assert history[0] == state
        assert next(m["id"] for m in state["values"]["messages"]) == "q1"
        # Newest first, each one's parent the next older one on the branch (one branch here).
        created = [s["created_at"] for s in history]
        assert created == sorted(created, reverse=True)
        for newer, older in itertools.pairwise(history):
            assert (
                newer["parent_checkpoint"]["checkpoint_id"]
                == (older["checkpoint"]["checkpoint_id"])
            )
        assert history[-1]["parent_checkpoint"] is None
        # Per turn: before its input (nothing of it yet), its input applied, its end.
        for qid in ("q1", "q2"):
            applied = first_seen(history, qid)
            assert applied["next"] and ids(applied)[-1] == qid
            before = next(s for s in history if s["checkpoint"] == applied["parent_checkpoint"])
            assert before["metadata"]["source"] == "input" and before["next"] == ["__start__"]
            assert qid not in ids(before)
        ends = [s for s in history if not s["next"]]
        assert len(ends) == 2 and ends[0] == state
        assert ids(ends[1])[-1] != "q1" and "q2" not in ids(ends[1])
        # The steps in between are pruned: at most the three boundaries per turn.
        assert len(history) == 6, [(s["metadata"]["source"], s["next"]) for s in history]

        # Paging: ``before`` continues where a page ended; GET takes the same.
        page = await client.threads.get_history(tid, limit=2)
        rest = await client.threads.get_history(tid, limit=100, before=page[-1]["checkpoint"])
        assert [s["checkpoint"] for s in page + rest] == [s["checkpoint"] for s in history]
        got = await client.http.get(
            f"/threads/{tid}/history",
            params={"limit": 1, "before": page[0]["checkpoint"]["checkpoint_id"]},
        )
        assert got == [history[1]]

        # The state at any of them, by id; the head's is the thread's state.
        for past in history:
            at = await client.threads.get_state(
                tid, checkpoint_id=past["checkpoint"]["checkpoint_id"]
            )
            assert at == past
            assert await client.threads.get_state(tid, checkpoint=past["checkpoint"]) == past
        with pytest.raises(NotFoundError) as missing:
            await client.threads.get_state(tid, checkpoint_id="1f0-not-a-checkpoint")
        assert missing.value.response.json()["error"] == "checkpoint_not_found"
        other = await two_turns(client)
        foreign = (await client.threads.get_state(other))["checkpoint"]["checkpoint_id"]
        with pytest.raises(NotFoundError):
            await client.threads.get_state(tid, checkpoint_id=foreign)


async def test_refresh_and_edit_fork_the_thread_and_keep_the_replaced_branch(
    app_factory: AppFactory,
) -> None:
    """Agent Chat UI's Refresh (no input, the parent of the state where the answer first
    appeared) and Edit (new input, the parent of the state where the question first appeared),
    as LangGraph's own server answers them: the thread's values become the fork; the replaced
    turns stay readable at their checkpoints; the fork point has both children (the UI's
    branch switcher)."""
    async with app_factory() as h, serve_in_loop(h.app) as url:
        await add_doc(h)
        client = get_client(url=url, api_key=API_KEY)
        tid = await two_turns(client)
        old = await client.threads.get_state(tid)
        old_answer = old["values"]["messages"][-1]
        assert old_answer["type"] == "ai"
        history = await client.threads.get_history(tid, limit=100)
        seen = first_seen(history, old_answer["id"])

        # Refresh: the answer again from the state its question was applied in.
        parts = [
            p
            async for p in client.runs.stream(
                tid,
                "default",
                input=None,
                checkpoint=seen["parent_checkpoint"],
                stream_mode=["values"],
            )
        ]
        assert [p.event for p in parts if p.event == "error"] == []
        final = [p.data for p in parts if p.event == "values"][-1]["messages"]
        kept = ids(old)[: ids(old).index("q2") + 1]
        assert [m["id"] for m in final][: len(kept)] == kept
        assert final[-1]["type"] == "ai" and final[-1]["id"] != old_answer["id"]
        assert old_answer["id"] not in [m["id"] for m in final]
        refreshed = await client.threads.get_state(tid)
        assert refreshed["values"]["messages"] == final
        history = await client.threads.get_history(tid, limit=100)
        fork_point = seen["parent_checkpoint"]["checkpoint_id"]
        children = [
            s for s in history if (s["parent_checkpoint"] or {}).get("checkpoint_id") == fork_point
        ]
        assert len(children) == 2  # the replaced answer and the new one: two branches
        # Nothing lost: the replaced answer is still there at its checkpoint.
        at_old = await client.threads.get_state(
            tid, checkpoint_id=old["checkpoint"]["checkpoint_id"]
        )
        assert at_old["values"]["messages"] == old["values"]["messages"]

        # Edit q2: new input from the state before q2 was applied.
        q2_seen = first_seen(history, "q2")
        edited = await client.runs.wait(
            tid,
            "default",
            input=human("What renews a lease?", "q2-edit"),
            checkpoint=q2_seen["parent_checkpoint"],
        )
        assert isinstance(edited, dict)
        got = [m["id"] for m in edited["messages"]]
        assert got[: got.index("q2-edit")] == ids(old)[: ids(old).index("q2")]
        assert "q2" not in got and edited["messages"][-1]["type"] == "ai"
        state = await client.threads.get_state(tid)
        assert [m["id"] for m in state["values"]["messages"]] == got
        history = await client.threads.get_history(tid, limit=100)
        before_q2 = q2_seen["parent_checkpoint"]["checkpoint_id"]
        assert (
            len(
                [
                    s
                    for s in history
                    if (s["parent_checkpoint"] or {}).get("checkpoint_id") == before_q2
                ]
            )
            == 2
        )
        # Both earlier versions of the second turn are still readable.
        for past in (old, refreshed):
            at = await client.threads.get_state(
                tid, checkpoint_id=past["checkpoint"]["checkpoint_id"]
            )
            assert at["values"]["messages"] == past["values"]["messages"]
        # The thread goes on from the edit.
        after = await client.runs.wait(tid, "default", input=human("Thanks", "q3"))
        assert isinstance(after, dict)
        assert [m["id"] for m in after["messages"]][: len(got)] == got


async def run_status(client: Any, tid: str, run_id: str, status: str) -> bool:
    return bool((await client.runs.get(tid, run_id))["status"] == status)


async def test_forks_are_refused_while_busy_and_from_what_is_not_a_turn_boundary(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    """409 ``thread_busy`` while a run is active or input queued, on both doors, nothing
    written; a checkpoint of another thread or an unknown one is 404 ``checkpoint_not_found``;
    no input from a run's end (nothing to run again) is 422 ``checkpoint_not_forkable``.
    Against the local OpenAI-protocol provider, which holds the run."""
    agent = {"id": "default", "tools": []}
    with OpenAICompatibleServer() as srv:
        async with (
            app_factory(
                agents_file=agents_file(tmp_path, agent), llm_base_url=srv.base_url, llm_api_key="k"
            ) as h,
            serve_in_loop(h.app) as url,
        ):
            client = get_client(url=url, api_key=API_KEY)
            srv.enqueue_text("Leases expire after thirty seconds.")
            tid = (await client.threads.create())["thread_id"]
            await client.runs.wait(tid, "default", input=human("When does a lease expire?", "q1"))
            history = await client.threads.get_history(tid, limit=100)
            applied = first_seen(history, "q1")
            before = applied["parent_checkpoint"]

            srv.hold()
            running = await client.runs.create(tid, "default", input=human("And renewal?", "q2"))
            await wait_until(lambda: run_status(client, tid, running["run_id"], "running"), "run")
            queued = await client.runs.create(tid, "default", input=human("Thanks", "q3"))
            for kwargs in (
                {"input": None, "checkpoint": applied["checkpoint"]},
                {"input": human("Edited?", "q1-edit"), "checkpoint": before},
            ):
                with pytest.raises(ConflictError) as busy:
                    await client.runs.create(tid, "default", **kwargs)
                assert busy.value.response.json()["error"] == "thread_busy"
            v1 = await h.client.post(f"/v1/threads/{tid}/regenerate", headers=AUTH)
            assert v1.status_code == 409 and v1.json()["error"] == "thread_busy"
            assert v1.headers["retry-after"]
            srv.enqueue_text("Renewed by heartbeats.")
            srv.enqueue_text("You are welcome.")
            srv.release()
            await wait_until(lambda: run_status(client, tid, queued["run_id"], "success"), "runs")
            branches = (await h.client.get(f"/v1/threads/{tid}/branches", headers=AUTH)).json()
            assert [b["kind"] for b in branches["items"]] == ["first"]  # nothing was written
            assert ids(await client.threads.get_state(tid))[-1] != "q1-edit"

            other = (await client.threads.create())["thread_id"]
            srv.enqueue_text("Hello.")
            await client.runs.wait(other, "default", input=human("Hi", "o1"))
            foreign = (await client.threads.get_state(other))["checkpoint"]
            for checkpoint in (foreign, {"checkpoint_id": "1f0-unknown", "checkpoint_ns": ""}):
                with pytest.raises(NotFoundError) as missing:
                    await client.runs.create(
                        tid, "default", input=human("Edited?"), checkpoint=checkpoint
                    )
                assert missing.value.response.json()["error"] == "checkpoint_not_found"
            end = history[0]["checkpoint"]  # the first run's end: no input, nothing to run
            with pytest.raises(UnprocessableEntityError) as refused:
                await client.runs.create(tid, "default", input=None, checkpoint=end)
            assert refused.value.response.json()["error"] == "checkpoint_not_forkable"
            assert [b["kind"] for b in branches["items"]] == ["first"]
