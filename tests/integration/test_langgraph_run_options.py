"""Issue 32 item 6: nothing a LangGraph run names is silently ignored. ``context`` and
``config.configurable`` reach the graph, ``tasks``/``checkpoints``/``debug`` pass LangGraph's own
parts through, ``cancel(wait=True)`` returns once the run has stopped, ``webhook`` POSTs the
ended run; the rest is refused with 422 ``not_supported`` naming the field. Through the
official langgraph-sdk against a served app."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client

from tests.support.app_harness import API_KEY, AppFactory
from tests.support.live_server import serve_in_loop
from tests.support.openai_server import OpenAICompatibleServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

KEY = {"X-Api-Key": API_KEY}

CONTEXT_GRAPH = """
from dataclasses import dataclass
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import StateGraph, MessagesState, START, END
from langgraph.runtime import Runtime

@dataclass
class Ctx:
    user: str = "nobody"

def answer(state: MessagesState, config: RunnableConfig, runtime: Runtime[Ctx]):
    flavor = config["configurable"].get("flavor", "plain")
    thread = config["configurable"]["thread_id"]
    text = f"user={runtime.context.user} flavor={flavor} thread={thread}"
    return {"messages": [AIMessage(content=text)]}

builder = StateGraph(MessagesState, context_schema=Ctx)
builder.add_node("answer", answer)
builder.add_edge(START, "answer")
builder.add_edge("answer", END)
graph = builder.compile()
"""


def human(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def own_graph(tmp_path: Path) -> str:
    (tmp_path / "ctx_graph.py").write_text(CONTEXT_GRAPH)
    config = {"graphs": {"ctx": "./ctx_graph.py:graph"}, "dependencies": ["."]}
    (tmp_path / "langgraph.json").write_text(json.dumps(config))
    return str(tmp_path / "langgraph.json")


async def test_unsupported_fields_are_refused_by_name(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        tid = (await h.client.post("/threads", json={}, headers=KEY)).json()["thread_id"]
        base = {"assistant_id": "default", "input": human("hi")}
        cases = [
            ({"interrupt_before": ["tools"]}, "interrupt_before"),
            ({"interrupt_after": "*"}, "interrupt_after"),
            ({"stream_mode": ["values", "events"]}, "stream_mode"),
            ({"config": {"tags": ["x"]}}, "config.tags"),
            (
                {"config": {"configurable": {"checkpoint_id": "1"}}},
                "config.configurable.checkpoint_id",
            ),
            (
                {"config": {"configurable": {"thread_id": "another"}}},
                "config.configurable.thread_id",
            ),
            # An agent Threadkeeper assembles keeps its runtime context its own.
            ({"context": {"user": "ann"}}, "context"),
        ]
        for extra, field in cases:
            resp = await h.client.post(f"/threads/{tid}/runs", json={**base, **extra}, headers=KEY)
            assert resp.status_code == 422, (field, resp.text)
            body = resp.json()
            assert body["error"] == "not_supported", body
            assert body["fields"][0]["field"] == field, body
        for url in [
            "ftp://example.com/hook",
            "http://127.0.0.1:9/hook",
            "http://[::1]/x",
            "http://localhost:9/hook",  # a name: what it resolves to is checked
            "http://[64:ff9b::a9fe:a9fe]/latest",  # NAT64 of the metadata address
        ]:
            resp = await h.client.post(
                f"/threads/{tid}/runs/wait", json={**base, "webhook": url}, headers=KEY
            )
            assert resp.status_code == 422 and resp.json()["error"] == "webhook_refused", url
        resumed = await h.client.post(
            f"/threads/{tid}/runs",
            json={
                "assistant_id": "default",
                "command": {"resume": {"decisions": []}},
                "context": {"a": 1},
            },
            headers=KEY,
        )
        assert resumed.status_code == 422 and resumed.json()["fields"][0]["field"] == "context"
        # Nothing refused was queued; its own thread_id in configurable is accepted.
        assert (await h.client.get(f"/threads/{tid}/runs", headers=KEY)).json() == []
        ok = await h.client.post(
            f"/threads/{tid}/runs",
            json={**base, "config": {"configurable": {"thread_id": tid}}},
            headers=KEY,
        )
        assert ok.status_code == 200, ok.text
        rollback = await h.client.post(
            f"/threads/{tid}/runs/{ok.json()['run_id']}/cancel?wait=0&action=rollback",
            headers=KEY,
        )
        assert rollback.status_code == 422 and rollback.json()["fields"][0]["field"] == "action"
        doc = (await h.client.get("/langgraph/openapi.json")).json()
        for path in ("", "/stream", "/wait"):
            create = doc["paths"][f"/threads/{{thread_id}}/runs{path}"]["post"]["responses"]
            declared = json.dumps(create["422"])
            assert "not_supported" in declared and "webhook_refused" in declared, path
        cancel = doc["paths"]["/threads/{thread_id}/runs/{run_id}/cancel"]["post"]
        assert "not_supported" in json.dumps(cancel["responses"]["422"])


async def test_context_configurable_and_graph_stream_modes_reach_an_own_graph(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    async with (
        app_factory(agents_file=own_graph(tmp_path)) as h,
        serve_in_loop(h.app) as url,
    ):
        client = get_client(url=url, api_key=API_KEY)
        tid = (await client.threads.create())["thread_id"]
        waited = await client.runs.wait(
            tid,
            "ctx",
            input=human("hi"),
            context={"user": "ann"},
            config={"configurable": {"flavor": "mint"}},
        )
        assert isinstance(waited, dict)
        assert waited["messages"][-1]["content"] == f"user=ann flavor=mint thread={tid}"
        # Without them: the context schema's default, no flavor.
        again = await client.runs.wait(tid, "ctx", input=human("again"))
        assert isinstance(again, dict)
        assert again["messages"][-1]["content"] == f"user=nobody flavor=plain thread={tid}"

        parts = [
            (p.event, p.data)
            async for p in client.runs.stream(
                tid,
                "ctx",
                input=human("more"),
                stream_mode=["tasks", "checkpoints", "debug", "values"],
            )
        ]
        events = {e for e, _ in parts}
        assert {"tasks", "checkpoints", "debug", "values"} <= events, events
        tasks = [d for e, d in parts if e == "tasks"]
        # LangGraph's task start (input) and its result, for the graph's node.
        assert any(t.get("name") == "answer" and "input" in t for t in tasks), tasks
        assert any(t.get("name") == "answer" and "result" in t for t in tasks), tasks
        checkpoints = [d for e, d in parts if e == "checkpoints"]
        assert all("values" in c and "next" in c for c in checkpoints) and checkpoints
        assert checkpoints[-1]["values"]["messages"][-1]["content"].startswith("user=nobody")
        debug = [d for e, d in parts if e == "debug"]
        assert {d["type"] for d in debug} >= {"checkpoint", "task", "task_result"}, debug
        # A run that did not name them records none.
        plain = [
            p.event
            async for p in client.runs.stream(
                tid, "ctx", input=human("quiet"), stream_mode=["values"]
            )
        ]
        assert set(plain) == {"metadata", "values"}


async def test_cancel_with_wait_returns_when_the_run_has_stopped(
    app_factory: AppFactory,
) -> None:
    with OpenAICompatibleServer() as srv:
        srv.hold()
        overrides = {"llm_base_url": srv.base_url, "llm_api_key": "k"}
        async with app_factory(**overrides) as h, serve_in_loop(h.app) as url:
            client = get_client(url=url, api_key=API_KEY)
            tid = (await client.threads.create())["thread_id"]
            run = await client.runs.create(tid, "default", input=human("slow"))

            async def running() -> bool:
                got = await client.runs.get(tid, run["run_id"])
                return bool(got["status"] == "running")

            await wait_until(running, "the run to start")
            assert await asyncio.to_thread(srv.wait_for_requests, 1, 30.0)
            await client.runs.cancel(tid, run["run_id"], wait=True)
            # Returned only once the worker stopped it: no longer running, the thread free.
            assert (await client.runs.get(tid, run["run_id"]))["status"] == "interrupted"
            assert (await client.threads.get(tid))["status"] == "idle"
            srv.drop_held()


class _Hook(BaseHTTPRequestHandler):
    received: list[dict[str, Any]]
    failures: list[int]

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.received.append(body)
        status = self.failures.pop(0) if self.failures else 200
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[tuple[str, type[_Hook]]]:
    handler = type("Hook", (_Hook,), {"received": [], "failures": [503]})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", handler
    finally:
        server.shutdown()
        server.server_close()


async def test_webhook_posts_the_ended_run_with_retries(
    app_factory: AppFactory, hook: tuple[str, type[_Hook]]
) -> None:
    url_of_hook, handler = hook
    async with (
        app_factory(webhook_allow_private=True) as h,
        serve_in_loop(h.app) as url,
    ):
        client = get_client(url=url, api_key=API_KEY)
        tid = (await client.threads.create())["thread_id"]
        run = await client.runs.create(tid, "default", input=human("lease?"), webhook=url_of_hook)

        async def delivered() -> bool:
            return len(handler.received) >= 2

        await wait_until(delivered, "the webhook")
        # The first POST got a 503: retried, the same body.
        first, second = handler.received[:2]
        assert first == second
        assert second["run_id"] == run["run_id"] and second["thread_id"] == tid
        assert second["status"] == "success"
        assert second["values"]["messages"][-1]["type"] == "ai"
        assert second["values"]["messages"][0]["content"] == "lease?"


async def test_webhook_refused_before_anything_is_queued(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h, serve_in_loop(h.app) as url:
        client = get_client(url=url, api_key=API_KEY)
        tid = (await client.threads.create())["thread_id"]
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await client.runs.create(
                tid, "default", input=human("hi"), webhook="http://169.254.169.254/latest"
            )
        assert refused.value.response.status_code == 422
        assert refused.value.response.json()["error"] == "webhook_refused"
        assert await client.runs.list(tid) == []


async def test_graph_stream_modes_of_an_assembled_agent(app_factory: AppFactory) -> None:
    """The default agent's own nodes (model, tools) as LangGraph streams them, JSON all through
    (messages included)."""
    async with app_factory() as h, serve_in_loop(h.app) as url:
        client = get_client(url=url, api_key=API_KEY)
        tid = (await client.threads.create())["thread_id"]
        parts = [
            (p.event, p.data)
            async for p in client.runs.stream(
                tid, "default", input=human("When does a lease expire?"), stream_mode=["tasks"]
            )
        ]
        names = {d["name"] for e, d in parts if e == "tasks"}
        assert {"model", "tools"} <= names, parts
        results = [
            d for e, d in parts if e == "tasks" and d.get("name") == "model" and "result" in d
        ]
        messages = [m for r in results for m in (r["result"].get("messages") or [])]
        assert messages and all(isinstance(m, dict) and m.get("type") == "ai" for m in messages)
