"""Issue 36 on /v1: Regenerate and Edit fork the thread through intake (the LangGraph door's
runs from a checkpoint take the same use case), every branch stays readable, and a fork of a
compressed thread keeps its summary and its Workdir originals (hash-verified)."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from typing import Any

import pytest

from tests.support.api import messages, new_thread, run_turns, seed_kb, state
from tests.support.app_harness import API_KEY, AUTH, AppFactory, AppHarness
from tests.support.corpus import BIG
from tests.support.openai_server import OpenAICompatibleServer
from tests.support.tcp_proxy import postgres_proxy

pytestmark = pytest.mark.integration

#: Only keeps a regression from hanging the suite.
HANG_GUARD = 60.0


async def branch_messages(h: AppHarness, tid: str, branch: str) -> list[dict[str, Any]]:
    resp = await h.client.get(
        f"/v1/threads/{tid}/messages", params={"branch_id": branch}, headers=AUTH
    )
    assert resp.status_code == 200, resp.text
    return resp.json()["items"]  # type: ignore[no-any-return]


async def branches(h: AppHarness, tid: str) -> list[dict[str, Any]]:
    resp = await h.client.get(f"/v1/threads/{tid}/branches", headers=AUTH)
    assert resp.status_code == 200, resp.text
    return resp.json()["items"]  # type: ignore[no-any-return]


async def wait_fork(h: AppHarness, tid: str, done: set[str]) -> None:
    run = await h.wait_for_run(tid, statuses={"completed", "failed"}, exclude=done)
    assert run["status"] == "completed", run["error"]
    done.add(run["id"])


async def test_regenerate_and_edit_make_branches_and_every_branch_stays_readable(
    app_factory: AppFactory,
) -> None:
    async with app_factory() as h:
        await seed_kb(h)
        tid = await new_thread(h)
        await run_turns(h, tid, ["how does a lease expire?", "what renews the lease?"])
        done = set(await h.run_ids(tid))
        first = await messages(h, tid)
        q1, q2 = [m for m in first if m["role"] == "user"]
        assert first[-1]["role"] == "assistant"

        # Regenerate the last answer: the chat up to q2, then a new answer.
        resp = await h.client.post(f"/v1/threads/{tid}/regenerate", headers=AUTH)
        assert resp.status_code == 202, resp.text
        regen = resp.json()
        assert regen["message_id"] == q2["id"]
        await wait_fork(h, tid, done)
        second = await messages(h, tid)
        upto_q2 = [m["id"] for m in first][: [m["id"] for m in first].index(q2["id"]) + 1]
        assert [m["id"] for m in second][: len(upto_q2)] == upto_q2
        assert second[-1]["role"] == "assistant"
        assert not {m["id"] for m in second[len(upto_q2) :]} & {m["id"] for m in first}
        listed = await branches(h, tid)
        assert [(b["kind"], b["current"]) for b in listed] == [
            ("first", False),
            ("regenerate", True),
        ]
        assert listed[0]["id"] == tid and listed[1]["id"] == regen["branch_id"]
        assert listed[1]["parent_id"] == tid and listed[1]["fork_seq"] == q2["seq"]
        # Nothing lost: the first branch reads as it was.
        assert await branch_messages(h, tid, tid) == first

        # Edit q1: a new branch from before it, with the new question and its answer only.
        resp = await h.client.post(
            f"/v1/threads/{tid}/messages/{q1['id']}/edit",
            json={"content": "when is a lease renewed?"},
            headers=AUTH,
        )
        assert resp.status_code == 202, resp.text
        edit = resp.json()
        await wait_fork(h, tid, done)
        third = await messages(h, tid)
        assert third[0]["id"] == edit["message_id"]
        assert third[0]["content"] == "when is a lease renewed?"
        assert third[-1]["role"] == "assistant"
        assert not {m["id"] for m in third} & {m["id"] for m in first + second}
        listed = await branches(h, tid)
        assert [b["kind"] for b in listed] == ["first", "regenerate", "edit"]
        assert listed[2]["current"] and listed[2]["fork_seq"] == 0
        assert await branch_messages(h, tid, regen["branch_id"]) == second
        assert await branch_messages(h, tid, tid) == first
        # A thread list (the LangGraph door's search) opens with the current branch's first.
        found = await h.client.post(
            "/threads/search", json={"ids": [tid]}, headers={"X-Api-Key": API_KEY}
        )
        assert found.json()[0]["values"]["messages"][0]["content"] == "when is a lease renewed?"
        # The model view follows the current branch.
        view = await state(h, tid)
        humans = [m["content"] for m in view["messages"] if m["type"] == "human"]
        assert humans == ["when is a lease renewed?"]

        # The thread goes on from the edit; paging a branch works as ListMessages does.
        await run_turns(h, tid, ["and the heartbeat?"])
        fourth = await messages(h, tid)
        assert [m["id"] for m in fourth][: len(third)] == [m["id"] for m in third]
        page = await h.client.get(
            f"/v1/threads/{tid}/messages", params={"limit": 2, "branch_id": tid}, headers=AUTH
        )
        assert [m["id"] for m in page.json()["items"]] == [m["id"] for m in first[:2]]

        # Declared refusals: unknown branch / message, a non-user message.
        unknown = "00000000-0000-0000-0000-000000000000"
        resp = await h.client.get(
            f"/v1/threads/{tid}/messages", params={"branch_id": unknown}, headers=AUTH
        )
        assert resp.status_code == 404 and resp.json()["error"] == "not_found"
        resp = await h.client.post(
            f"/v1/threads/{tid}/messages/{unknown}/edit", json={"content": "x"}, headers=AUTH
        )
        assert resp.status_code == 404 and resp.json()["error"] == "not_found"
        answer = fourth[-1]
        resp = await h.client.post(
            f"/v1/threads/{tid}/regenerate", json={"message_id": answer["id"]}, headers=AUTH
        )
        assert resp.status_code == 400 and resp.json()["error"] == "validation_error"
        # A message of a replaced branch is not on the current one.
        resp = await h.client.post(
            f"/v1/threads/{tid}/messages/{q2['id']}/edit", json={"content": "x"}, headers=AUTH
        )
        assert resp.status_code == 404


async def test_edit_of_a_compressed_thread_keeps_summary_and_workdir_originals(
    app_factory: AppFactory, workdir_settings: dict[str, Any]
) -> None:
    async with app_factory(**BIG, **workdir_settings) as h:
        await seed_kb(h)
        tid = await new_thread(h)
        await run_turns(h, tid, ["how does a lease expire?", "what renews the lease heartbeat?"])
        resp = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert resp.status_code == 200, resp.text
        await run_turns(h, tid, ["and when is a run failed?"])
        done = set(await h.run_ids(tid))
        before = await messages(h, tid)
        compressed = await state(h, tid)
        assert compressed["summary"]["present"] is True
        q3 = [m for m in before if m["role"] == "user"][-1]

        resp = await h.client.post(
            f"/v1/threads/{tid}/messages/{q3['id']}/edit",
            json={"content": "what documents a dispatched request?"},
            headers=AUTH,
        )
        assert resp.status_code == 202, resp.text
        await wait_fork(h, tid, done)
        after = await messages(h, tid)
        kept = [m["id"] for m in before][: [m["id"] for m in before].index(q3["id"])]
        assert [m["id"] for m in after][: len(kept)] == kept
        assert after[len(kept)]["content"] == "what documents a dispatched request?"
        assert await branch_messages(h, tid, tid) == before

        # The fork's model view is the checkpoint's: the summary is still there, the edited
        # question replaces q3, and the Workdir originals stay readable and hash-verified.
        view = await state(h, tid)
        assert view["summary"]["present"] is True
        humans = [m["content"] for m in view["messages"] if m["type"] == "human"]
        assert "what documents a dispatched request?" in humans
        assert "and when is a run failed?" not in humans
        offloaded = [m for m in view["messages"] if m["offload"]]
        assert offloaded
        for m in offloaded:
            f = await h.client.get(
                f"/v1/threads/{tid}/workdir/{m['offload']['path']}", headers=AUTH
            )
            assert f.status_code == 200
            assert hashlib.sha256(f.content).hexdigest() == m["offload"]["sha256"]

        # Manual compression acts on the current branch's head.
        resp = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert resp.status_code in (200, 422), resp.text
        view = await state(h, tid)
        texts = " ".join(str(m["content"]) for m in view["messages"])
        assert "and when is a run failed?" not in texts


async def test_a_regenerate_caught_by_a_database_outage_goes_on_on_its_branch(
    app_factory: AppFactory, clean_db: str
) -> None:
    """The fork's model call answers while the database is gone: the run rides out the outage
    and goes on from the fork's last checkpoint, never from the branch it replaced."""
    with OpenAICompatibleServer() as srv:
        async with (
            postgres_proxy(clean_db) as proxy,
            app_factory(database_url=proxy.url, llm_base_url=srv.base_url, llm_api_key="k") as h,
        ):
            tid = await new_thread(h)
            srv.enqueue_text("The first answer.")
            await run_turns(h, tid, ["are you there?"])
            first = await messages(h, tid)
            done = set(await h.run_ids(tid))

            srv.hold()
            srv.enqueue_text("The second answer.")
            resp = await h.client.post(f"/v1/threads/{tid}/regenerate", headers=AUTH)
            assert resp.status_code == 202, resp.text
            assert await asyncio.to_thread(srv.wait_for_requests, 2, HANG_GUARD)
            [run_id] = [r for r in await h.run_ids(tid) if r not in done]
            await proxy.cut(drop_new=True)
            srv.release()
            async with asyncio.timeout(HANG_GUARD):
                while uuid.UUID(run_id) not in h.container.worker.waiting_for_database:  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            await proxy.restore()
            run = await h.wait_for_run(tid, statuses={"completed", "failed"}, exclude=done)
            assert run["status"] == "completed", (run["error_code"], run["error"])
            # One new answer on the fork (the model step ran again from the fork's last
            # checkpoint, or its checkpoint landed once the database answered).
            now = await messages(h, tid)
            assert [m["role"] for m in now] == ["user", "assistant"]
            assert now[0]["id"] == first[0]["id"] and now[1]["id"] != first[1]["id"]
            assert await branch_messages(h, tid, tid) == first
            view = await state(h, tid)
            assert [m["content"] for m in view["messages"]] == [m["content"] for m in now]
            assert first[1]["content"] == "The first answer."
