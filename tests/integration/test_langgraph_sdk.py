"""Issue 20: the official Python langgraph-sdk against a served Threadkeeper (real socket)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import ConflictError

from tests.support.api import add_doc, seed_kb
from tests.support.app_harness import API_KEY, AppFactory
from tests.support.corpus import BIG
from tests.support.live_server import serve_in_loop
from tests.support.openai_server import OpenAICompatibleServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def human(text: str, message_id: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "user", "content": [{"type": "text", "text": text}]}
    if message_id:
        message["id"] = message_id
    return {"messages": [message]}


async def collect(stream: Any) -> list[tuple[str, Any]]:
    return [(part.event, part.data) for part in [p async for p in stream]]


async def test_core_flow_with_every_stream_mode(
    app_factory: AppFactory, database_route: dict[str, Any]
) -> None:
    """Straight to PostgreSQL, and through PgBouncer in transaction mode."""
    async with app_factory(**database_route) as h, serve_in_loop(h.app) as url:
        await add_doc(h)
        client = get_client(url=url, api_key=API_KEY)
        info = await client.http.get("/info")
        assert "version" in info and "flags" in info
        assistants = await client.assistants.search()
        assert [a["graph_id"] for a in assistants] == ["default"]
        assert await client.assistants.count() == 1

        thread = await client.threads.create(metadata={"project": "apollo"})
        tid = thread["thread_id"]
        assert thread["status"] == "idle" and thread["metadata"] == {"project": "apollo"}
        parts = await collect(
            client.runs.stream(
                tid,
                "default",
                input=human("When does a lease expire?", "msg-1"),
                stream_mode=["values", "updates", "messages-tuple", "custom"],
            )
        )
        events = [e for e, _ in parts]
        assert events[0] == "metadata", events
        assert "end" not in events and "error" not in events
        values = [d for e, d in parts if e == "values"]
        assert values[0]["messages"][0]["id"] == "msg-1"
        final = values[-1]["messages"]
        assert final[0]["type"] == "human" and final[-1]["type"] == "ai"
        assert "lease" in final[-1]["content"].lower()
        assert any(e == "updates" and "model" in d for e, d in parts)
        tuples = [d for e, d in parts if e == "messages"]
        assert tuples and all(d[1]["langgraph_node"] in ("model", "tools") for d in tuples)

        got = await client.threads.get(tid)
        assert got["status"] == "idle"
        assert got["metadata"]["graph_id"] == "default"
        assert got["metadata"]["assistant_id"] == "default"
        assert got["values"]["messages"][0]["content"] == "When does a lease expire?"

        state = await client.threads.get_state(tid)
        assert state["values"]["messages"] == final
        assert state["checkpoint"]["checkpoint_id"]
        tk = state["values"]["threadkeeper"]
        assert tk["summary_threshold"] > 0 and tk["input_tokens"] > 0 and "pressure" in tk
        history = await client.threads.get_history(tid, limit=10)
        assert history[0]["checkpoint"] == state["checkpoint"]

        # The next message names the head checkpoint, as Agent Chat UI sends it: accepted.
        waited = await client.runs.wait(
            tid,
            "default",
            input=human("And what renews it?"),
            checkpoint={"checkpoint_id": state["checkpoint"]["checkpoint_id"], "checkpoint_ns": ""},
        )
        assert isinstance(waited, dict)
        after = waited["messages"]
        assert (
            after[: len(final)] == final and after[len(final)]["content"] == "And what renews it?"
        )
        assert after[-1]["type"] == "ai" and after[-1]["content"]

        found = await client.threads.search(metadata={"graph_id": "default"}, limit=5)
        assert [t["thread_id"] for t in found] == [tid]
        assert await client.threads.count(metadata={"project": "apollo"}) == 1
        assert await client.threads.search(metadata={"project": "zeus"}) == []

        runs = await client.runs.list(tid)
        assert [r["status"] for r in runs] == ["success", "success"]
        # Threadkeeper's own rules hold on this surface too: a short history cannot shrink.
        short = await h.client.post(
            f"/threads/{tid}/context/compress", headers={"X-Api-Key": API_KEY}
        )
        assert short.status_code == 422 and short.json()["error"] == "nothing_to_compress"
        # update_state on an idle thread: not supported (the model view is Threadkeeper's).
        upd = await h.client.post(
            f"/threads/{tid}/state", json={"values": {}}, headers={"X-Api-Key": API_KEY}
        )
        assert upd.status_code == 501 and upd.json()["error"] == "not_implemented"


async def test_auth_cors_and_errors(app_factory: AppFactory) -> None:
    origin = "https://chat.example"
    async with app_factory(start_worker=False, cors_origins=origin) as h:
        c = h.client
        assert (await c.get("/info")).status_code == 200  # no key needed
        assert (await c.post("/threads", json={})).status_code == 401
        assert (await c.post("/threads", json={}, headers={"X-Api-Key": "nope"})).status_code == 401
        made = await c.post("/threads", json={}, headers={"X-Api-Key": API_KEY})
        assert made.status_code == 200 and made.json()["status"] == "idle"
        pre = await c.options(
            "/threads/search",
            headers={
                "Origin": origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "x-api-key, content-type",
            },
        )
        assert (
            pre.status_code == 204
            and "x-api-key" in pre.headers["access-control-allow-headers"].lower()
        )
        got = await c.post(
            "/threads/search", json={}, headers={"Origin": origin, "X-Api-Key": API_KEY}
        )
        exposed = got.headers["access-control-expose-headers"].lower()
        assert "content-location" in exposed and "location" in exposed.split(", ")
        tid = made.json()["thread_id"]
        key = {"X-Api-Key": API_KEY}
        bad = await c.post(
            f"/threads/{tid}/runs/wait",
            json={
                "assistant_id": "default",
                "input": {
                    "messages": [
                        {"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}
                    ]
                },
            },
            headers=key,
        )
        assert bad.status_code == 422 and bad.json()["error"] == "unprocessable", bad.text
        crons = await c.post("/runs/crons", json={}, headers=key)
        assert crons.status_code == 501 and crons.json()["error"] == "not_implemented"
        for method, path in [
            ("POST", f"/threads/{tid}/runs/crons"),
            ("POST", "/assistants"),
            ("POST", "/store/items/search"),
            ("POST", f"/threads/{tid}/copy"),
        ]:
            refused = await c.request(method, path, json={}, headers=key)
            assert refused.status_code == 501, (path, refused.text)
            assert refused.json()["error"] == "not_implemented"
            assert "not supported" in refused.json()["detail"]
        assert (await c.delete("/assistants/default", headers=key)).status_code == 405
        assert (await c.get("/assistants/nope", headers=key)).status_code == 404
        doc = (await c.get("/langgraph/openapi.json")).json()
        assert "/threads/{thread_id}/runs/stream" in doc["paths"]
        assert "/assistants/search" in doc["paths"]
        main_doc = (await c.get("/schema/openapi.json")).json()
        assert "/assistants/search" not in main_doc["paths"]


async def test_compression_route_and_pressure(app_factory: AppFactory) -> None:
    async with app_factory(**BIG) as h, serve_in_loop(h.app) as url:
        await seed_kb(h)
        client = get_client(url=url, api_key=API_KEY)
        tid = (await client.threads.create())["thread_id"]
        for text in ["how does a lease expire?", "what renews the lease heartbeat?"]:
            await client.runs.wait(tid, "default", input=human(text))
        before = await client.threads.get_state(tid)
        out = await client.http.post(f"/threads/{tid}/context/compress", json=None)
        assert out["before_tokens"] == before["values"]["threadkeeper"]["input_tokens"]
        assert out["after_tokens"] < out["before_tokens"]
        after = await client.threads.get_state(tid)
        # The full history is unchanged; the model view and its pressure shrank.
        assert after["values"]["messages"] == before["values"]["messages"]
        tk = after["values"]["threadkeeper"]
        assert tk["input_tokens"] == out["after_tokens"]
        assert tk["pressure"] < before["values"]["threadkeeper"]["pressure"]


async def test_interrupt_then_resume_with_an_edit(app_factory: AppFactory) -> None:
    async with app_factory(approval_tools="query_kb") as h, serve_in_loop(h.app) as url:
        await add_doc(h)
        client = get_client(url=url, api_key=API_KEY)
        tid = (await client.threads.create())["thread_id"]
        parts = [
            p
            async for p in client.runs.stream(
                tid, "default", input=human("lease?"), stream_mode=["values", "updates"]
            )
        ]
        run_id = parts[0].data["run_id"]
        last = [p.data for p in parts if p.event == "values"][-1]
        interrupt = last["__interrupt__"][0]
        assert interrupt["value"]["action_requests"][0]["name"] == "query_kb"
        assert any(p.event == "updates" and "__interrupt__" in p.data for p in parts)
        # As LangGraph's server reports it: the run ended, the thread waits for a decision.
        assert (await client.runs.get(tid, run_id))["status"] == "success"
        assert (await client.threads.get(tid))["status"] == "interrupted"
        state = await client.threads.get_state(tid)
        task_interrupt = state["tasks"][0]["interrupts"][0]
        assert task_interrupt["value"] == interrupt["value"]
        assert state["interrupts"] == [task_interrupt]

        decision = {
            "type": "edit",
            "edited_action": {"name": "query_kb", "args": {"query": "heartbeat renewal"}},
        }
        resumed = [
            p
            async for p in client.runs.stream(
                tid, "default", command={"resume": {"decisions": [decision]}}
            )
        ]
        assert resumed[0].event == "metadata" and resumed[0].data["run_id"] != run_id
        final = [p.data for p in resumed if p.event == "values"][-1]["messages"]
        assert [m["type"] for m in final] == ["human", "ai", "tool", "ai"]
        # The tool ran with the edited arguments.
        assert 'query_kb with arguments {"query": "heartbeat renewal"}' in final[2]["content"]
        assert "__interrupt__" not in [p.data for p in resumed if p.event == "values"][-1]
        assert (await client.threads.get(tid))["status"] == "idle"
        assert (await client.threads.get_state(tid))["tasks"] == []
        # Resuming a thread that waits for nothing is refused.
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await client.runs.wait(tid, "default", command={"resume": {"decisions": [decision]}})
        assert refused.value.response.status_code == 422


async def test_reject_busy_enqueue_in_order_and_cancel(app_factory: AppFactory) -> None:
    with OpenAICompatibleServer() as srv:
        srv.hold()
        overrides = {"llm_base_url": srv.base_url, "llm_api_key": "k"}
        async with app_factory(**overrides) as h, serve_in_loop(h.app) as url:
            client = get_client(url=url, api_key=API_KEY)
            tid = (await client.threads.create())["thread_id"]
            first = await client.runs.create(tid, "default", input=human("first"))
            await wait_until(
                lambda: _status(client, tid, first["run_id"], "running"), "the first run"
            )
            assert (await client.threads.get(tid))["status"] == "busy"
            with pytest.raises(ConflictError):
                await client.runs.create(
                    tid, "default", input=human("refused"), multitask_strategy="reject"
                )
            busy = await h.client.post(
                f"/threads/{tid}/state", json={"values": {}}, headers={"X-Api-Key": API_KEY}
            )
            assert busy.status_code == 409 and busy.json()["error"] == "thread_busy"
            second = await client.runs.create(tid, "default", input=human("second"))
            third = await client.runs.create(tid, "default", input=human("third"))
            assert second["status"] == "pending" and third["status"] == "pending"
            await client.runs.cancel(tid, first["run_id"])
            # Stopped while its model call is still held: the cancel, not the answer, ends it.
            await wait_until(
                lambda: _status(client, tid, first["run_id"], "interrupted"), "the cancel"
            )
            srv.release()
            srv.block = None
            joined = await client.runs.join(tid, third["run_id"])
            runs = await client.runs.list(tid)
            assert [r["run_id"] for r in runs] == [
                third["run_id"],
                second["run_id"],
                first["run_id"],
            ]
            assert [r["status"] for r in runs] == ["success", "success", "interrupted"]
            # FIFO: the second was answered before the third; the refused input never entered.
            texts = [m["content"] for m in joined["messages"]]
            assert texts.index("Echo: second") < texts.index("Echo: third")
            assert "refused" not in texts
            # Each run's input, then its answer; the cancelled first run answered nothing.
            assert texts == ["first", "second", "Echo: second", "third", "Echo: third"]


async def test_join_stream_after_a_reconnect(app_factory: AppFactory) -> None:
    async with app_factory() as h, serve_in_loop(h.app) as url:
        await add_doc(h)
        client = get_client(url=url, api_key=API_KEY)
        tid = (await client.threads.create())["thread_id"]
        modes = ["updates", "messages-tuple", "custom"]
        parts = [
            p
            async for p in client.runs.stream(
                tid, "default", input=human("lease?"), stream_mode=modes, stream_resumable=True
            )
        ]
        run_id = parts[0].data["run_id"]
        later = parts[1:]
        assert len(later) >= 3 and all(p.id for p in later)
        cut = len(later) // 2
        rejoined = [
            p
            async for p in client.runs.join_stream(
                tid, run_id, stream_mode=modes, last_event_id=later[cut - 1].id
            )
        ]
        assert [(p.event, p.id, p.data) for p in rejoined[1:]] == [
            (p.event, p.id, p.data) for p in later[cut:]
        ]
        # After the end the run is finished, so a reconnecting client stops there.
        assert (await client.runs.get(tid, run_id))["status"] == "success"
        joined = await client.runs.join(tid, run_id)
        assert joined["messages"][-1]["type"] == "ai"


async def _status(client: Any, tid: str, run_id: str, status: str) -> bool:
    return bool((await client.runs.get(tid, run_id))["status"] == status)


async def test_on_disconnect_cancel_cancels_the_run(app_factory: AppFactory) -> None:
    with OpenAICompatibleServer() as srv:
        srv.hold()
        overrides = {"llm_base_url": srv.base_url, "llm_api_key": "k"}
        async with app_factory(**overrides) as h, serve_in_loop(h.app) as url:
            client = get_client(url=url, api_key=API_KEY)
            tid = (await client.threads.create())["thread_id"]
            body = {"assistant_id": "default", "input": human("hi"), "on_disconnect": "cancel"}
            async with (
                httpx.AsyncClient(base_url=url, headers={"X-Api-Key": API_KEY}) as raw,
                raw.stream("POST", f"/threads/{tid}/runs/stream", json=body) as resp,
            ):
                assert resp.status_code == 200
                location = resp.headers["content-location"]
                assert resp.headers["location"].startswith(location + "/stream")
                async for line in resp.aiter_lines():
                    if line.startswith("data:"):
                        break  # the metadata part; then the client leaves
            run_id = location.rsplit("/", 1)[1]
            await wait_until(
                lambda: _status(client, tid, run_id, "interrupted"), "the run to be cancelled"
            )
            srv.release()
            srv.block = None
