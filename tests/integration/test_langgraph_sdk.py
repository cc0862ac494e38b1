"""Issue 20: the official Python langgraph-sdk against a served Threadkeeper (real socket)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import ConflictError

from tests.conftest import API_KEY, AppFactory
from tests.support.api import add_doc, seed_kb
from tests.support.corpus import BIG
from tests.support.live_server import serve_in_loop

pytestmark = pytest.mark.integration


def human(text: str, message_id: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "user", "content": [{"type": "text", "text": text}]}
    if message_id:
        message["id"] = message_id
    return {"messages": [message]}


async def collect(stream: Any) -> list[tuple[str, Any]]:
    return [(part.event, part.data) for part in [p async for p in stream]]


async def test_core_flow_with_every_stream_mode(app_factory: AppFactory) -> None:
    async with app_factory() as h, serve_in_loop(h.app) as url:
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
        assert [m["type"] for m in final][0] == "human" and final[-1]["type"] == "ai"
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
        assert upd.status_code == 501 and upd.json()["error"] == "not_supported"


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
        assert bad.status_code == 422, bad.text
        crons = await c.post("/runs/crons", json={}, headers=key)
        assert crons.status_code == 501 and crons.json()["error"] == "not_supported"
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
