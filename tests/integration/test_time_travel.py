"""Issue 36: time travel as chat UIs use it, through the real langgraph-sdk against a served app
(the offline agent): the history of real states per turn boundary, and the state at any of them.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import NotFoundError

from tests.support.api import add_doc
from tests.support.app_harness import API_KEY, AppFactory
from tests.support.live_server import serve_in_loop

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
        with pytest.raises(NotFoundError) as missing:
            await client.threads.get_state(tid, checkpoint_id="1f0-not-a-checkpoint")
        assert missing.value.response.json()["error"] == "checkpoint_not_found"
        other = await two_turns(client)
        foreign = (await client.threads.get_state(other))["checkpoint"]["checkpoint_id"]
        with pytest.raises(NotFoundError):
            await client.threads.get_state(tid, checkpoint_id=foreign)
