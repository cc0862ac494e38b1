"""Issue 32: the LangGraph surface exact where clients look, through the real langgraph-sdk
against a served app, with the local OpenAI-protocol provider streaming tokens and an
approval-gated Python tool (``word_count``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import ConflictError, NotFoundError
from sqlalchemy import event

from tests.support.agents_files import agents_file
from tests.support.app_harness import API_KEY, AUTH, AppFactory
from tests.support.live_server import serve_in_loop
from tests.support.openai_server import OpenAICompatibleServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

#: ``default`` answers through the local provider (the deployment's LLM settings) and has one
#: Python tool that waits for approval; ``glossary`` is the offline model.
DEFAULT = {
    "id": "default",
    "tools": [],
    "python_tools": ["examples.tools:word_count"],
    "approval_tools": ["word_count"],
}
GLOSSARY = {"id": "glossary", "model": "offline", "tools": []}


def human(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def served(app_factory: AppFactory, tmp_path: Path, srv: OpenAICompatibleServer) -> Any:
    return app_factory(
        agents_file=agents_file(tmp_path, DEFAULT, GLOSSARY),
        llm_base_url=srv.base_url,
        llm_api_key="k",
    )


async def run_status(client: Any, tid: str, run_id: str, status: str) -> bool:
    return bool((await client.runs.get(tid, run_id))["status"] == status)


async def interrupted_thread(client: Any, srv: OpenAICompatibleServer) -> tuple[str, list[Any]]:
    srv.enqueue_tool_call("word_count", {"text": "one two three"})
    srv.enqueue_text("That text has three words.")
    tid = (await client.threads.create())["thread_id"]
    parts = [
        p
        async for p in client.runs.stream(
            tid, "default", input=human("count: one two three"), stream_mode=["values"]
        )
    ]
    assert "__interrupt__" in [p.data for p in parts if p.event == "values"][-1]
    return tid, parts


async def test_interrupt_names_next_node_and_the_resume_is_a_listed_run(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    """Items 1 and 7: ``next`` names the node waiting on the approval (state and history's
    head); the resume is its own run in ``runs.list``; the thread is idle after it."""
    with OpenAICompatibleServer() as srv:
        async with served(app_factory, tmp_path, srv) as h, serve_in_loop(h.app) as url:
            client = get_client(url=url, api_key=API_KEY)
            tid, parts = await interrupted_thread(client, srv)
            first = parts[0].data["run_id"]
            state = await client.threads.get_state(tid)
            assert state["next"] == ["HumanInTheLoopMiddleware.after_model"], state
            assert state["next"] == [t["name"] for t in state["tasks"]]
            assert state["tasks"][0]["interrupts"][0]["value"]["action_requests"][0]["name"] == (
                "word_count"
            )
            history = await client.threads.get_history(tid)
            assert history[0]["next"] == state["next"]

            approve = {"resume": {"decisions": [{"type": "approve"}]}}
            with pytest.raises(httpx.HTTPStatusError) as other:  # item 8: not its agent
                await client.runs.wait(tid, "glossary", command=approve)
            assert other.value.response.json()["error"] == "agent_mismatch"
            answer = await client.runs.wait(tid, "default", command=approve)
            assert isinstance(answer, dict)
            assert answer["messages"][-1]["content"] == "That text has three words."
            assert answer["messages"][-2]["content"] == "3 words"
            runs = await client.runs.list(tid)
            assert [r["status"] for r in runs] == ["success", "success"]
            assert runs[1]["run_id"] == first and runs[0]["run_id"] != first
            resumed = await client.runs.get(tid, runs[0]["run_id"])
            assert resumed["status"] == "success" and resumed["assistant_id"] == "default"
            after = await client.threads.get_state(tid)
            assert after["next"] == [] and after["tasks"] == []
            assert (await client.threads.get(tid))["status"] == "idle"


async def test_delete_interrupted_thread_succeeds_running_one_is_busy(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    """Item 7: DELETE of an interrupted thread takes its waiting run with it; a thread whose
    run is running stays ``409 thread_busy``."""
    with OpenAICompatibleServer() as srv:
        async with served(app_factory, tmp_path, srv) as h, serve_in_loop(h.app) as url:
            client = get_client(url=url, api_key=API_KEY)
            tid, _ = await interrupted_thread(client, srv)
            assert (await client.threads.get(tid))["status"] == "interrupted"
            await client.threads.delete(tid)
            with pytest.raises(NotFoundError):
                await client.threads.get(tid)

            srv.hold()
            busy = (await client.threads.create())["thread_id"]
            run = await client.runs.create(busy, "default", input=human("hello"))
            await wait_until(lambda: run_status(client, busy, run["run_id"], "running"), "run")
            with pytest.raises(ConflictError) as refused:
                await client.threads.delete(busy)
            assert refused.value.response.json()["error"] == "thread_busy"
            srv.release()
            srv.block = None
            await client.runs.join(busy, run["run_id"])
            await client.threads.delete(busy)


async def test_enqueued_input_enters_when_its_run_starts(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    """Item 2: with ``enqueue``, the first run's values end with its own answer; the queued
    input shows up when its run starts, after that answer."""
    with OpenAICompatibleServer() as srv:
        srv.hold()
        async with served(app_factory, tmp_path, srv) as h, serve_in_loop(h.app) as url:
            client = get_client(url=url, api_key=API_KEY)
            tid = (await client.threads.create())["thread_id"]
            first = await client.runs.create(tid, "default", input=human("first"))
            await wait_until(lambda: run_status(client, tid, first["run_id"], "running"), "run")
            second = await client.runs.create(
                tid, "default", input=human("second"), multitask_strategy="enqueue"
            )
            assert second["status"] == "pending"
            waiting = await client.threads.get_state(tid)
            assert [m["content"] for m in waiting["values"]["messages"]] == ["first"]
            srv.release()
            srv.block = None
            one = await client.runs.join(tid, first["run_id"])
            assert [(m["type"], m["content"]) for m in one["messages"]] == [
                ("human", "first"),
                ("ai", "Echo: first"),
            ]
            two = await client.runs.join(tid, second["run_id"])
            expected = ["first", "Echo: first", "second", "Echo: second"]
            assert [m["content"] for m in two["messages"]] == expected
            state = await client.threads.get_state(tid)
            assert [m["content"] for m in state["values"]["messages"]] == expected


async def test_join_stream_of_a_live_run_replays_its_own_modes_with_ids(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    """Item 3: joining a live resumable run yields the run's parts in its own modes, with ids,
    from the start; ``last_event_id=k`` replays exactly the parts after k. Item 4: the run
    stream's ``Location`` is exactly ``/threads/{t}/runs/{r}/stream``."""
    with OpenAICompatibleServer() as srv:
        srv.hold()
        async with served(app_factory, tmp_path, srv) as h, serve_in_loop(h.app) as url:
            client = get_client(url=url, api_key=API_KEY)
            tid = (await client.threads.create())["thread_id"]
            modes = ["values", "messages-tuple"]
            run = await client.runs.create(
                tid,
                "default",
                input=human("tell me about leases and heartbeats"),
                stream_mode=modes,
                stream_resumable=True,
            )
            await wait_until(lambda: run_status(client, tid, run["run_id"], "running"), "run")
            live = client.runs.join_stream(tid, run["run_id"])
            head = await anext(live)  # joined while the model call is held
            assert head.event == "metadata"
            srv.release()
            srv.block = None
            parts = [head, *[p async for p in live]]
            events = {p.event for p in parts[1:]}
            assert events == {"values", "messages"}, events
            assert all(p.id for p in parts[1:])
            tokens = [p for p in parts if p.event == "messages"]
            assert tokens and all(p.data[0]["type"] == "AIMessageChunk" for p in tokens)
            assert "".join(p.data[0]["content"] for p in tokens) == (
                "Echo: tell me about leases and heartbeats"
            )
            final = [p.data for p in parts if p.event == "values"][-1]["messages"]
            assert final[-1]["content"] == "Echo: tell me about leases and heartbeats"

            k = len(parts) // 2
            again = [
                p
                async for p in client.runs.join_stream(
                    tid, run["run_id"], last_event_id=parts[k].id
                )
            ]
            assert [(p.event, p.id, p.data) for p in again if p.event != "metadata"] == [
                (p.event, p.id, p.data) for p in parts[k + 1 :]
            ]

            body = {"assistant_id": "default", "input": human("again"), "stream_mode": modes}
            async with (
                httpx.AsyncClient(base_url=url, headers={"X-Api-Key": API_KEY}) as raw,
                raw.stream("POST", f"/threads/{tid}/runs/stream", json=body) as resp,
            ):
                await resp.aread()
            run_path = resp.headers["content-location"]
            assert run_path.startswith(f"/threads/{tid}/runs/")
            assert resp.headers["location"] == f"{run_path}/stream"


async def test_a_threads_agent_is_fixed_where_it_was_chosen(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    """Item 8: the agent lives in ``conversations.agent_id``: a run naming another assistant on
    a bound thread is ``422 agent_mismatch`` (nothing written); ``graph_id`` / ``assistant_id``
    are derived from it, never stored as client metadata, and searchable."""
    with OpenAICompatibleServer() as srv:
        async with served(app_factory, tmp_path, srv) as h, serve_in_loop(h.app) as url:
            client = get_client(url=url, api_key=API_KEY)
            made = await h.client.post(
                "/v1/threads", json={"title": "g", "agent_id": "glossary"}, headers=AUTH
            )
            v1 = made.json()["id"]
            with pytest.raises(httpx.HTTPStatusError) as refused:
                await client.runs.wait(v1, "default", input=human("hi"))
            assert refused.value.response.status_code == 422
            assert refused.value.response.json()["error"] == "agent_mismatch"
            v1_view = (await h.client.get(f"/v1/threads/{v1}", headers=AUTH)).json()
            assert v1_view["agent_id"] == "glossary"
            assert (await client.threads.get_state(v1))["values"]["messages"] == []
            assert (await client.threads.get(v1))["metadata"]["graph_id"] == "glossary"

            # A LangGraph thread without an assistant: its first run chooses, then it is fixed.
            lg = (await client.threads.create(metadata={"project": "apollo"}))["thread_id"]
            assert (await client.threads.get(lg))["metadata"] == {"project": "apollo"}
            await client.runs.wait(lg, "glossary", input=human("what is a lease?"))
            with pytest.raises(httpx.HTTPStatusError) as again:
                await client.runs.create(lg, "default", input=human("switch"))
            assert again.value.response.json()["error"] == "agent_mismatch"
            got = await client.threads.get(lg)
            assert got["metadata"] == {
                "project": "apollo",
                "graph_id": "glossary",
                "assistant_id": "glossary",
            }
            stored = (await h.client.get(f"/v1/threads/{lg}", headers=AUTH)).json()
            assert stored["agent_id"] == "glossary" and stored["metadata"] == {"project": "apollo"}
            with pytest.raises(httpx.HTTPStatusError) as patched:
                await client.threads.update(lg, metadata={"graph_id": "default"})
            assert patched.value.response.json()["error"] == "agent_mismatch"
            await client.threads.update(lg, metadata={"graph_id": "glossary", "stage": 2})
            stored = (await h.client.get(f"/v1/threads/{lg}", headers=AUTH)).json()
            assert stored["metadata"] == {"project": "apollo", "stage": 2}

            with pytest.raises(httpx.HTTPStatusError) as unknown:
                await client.threads.create(graph_id="nope")
            assert unknown.value.response.json()["error"] == "unknown_agent"
            chosen = (await client.threads.create(graph_id="default"))["thread_id"]
            assert (await client.threads.get(chosen))["metadata"]["assistant_id"] == "default"
            glossary = await client.threads.search(metadata={"graph_id": "glossary"})
            assert {t["thread_id"] for t in glossary} == {v1, lg}
            assert await client.threads.count(metadata={"assistant_id": "default"}) == 1
            idle = await client.threads.search(status="idle", metadata={"graph_id": "glossary"})
            assert {t["thread_id"] for t in idle} == {v1, lg}
            first = next(t for t in glossary if t["thread_id"] == lg)
            assert first["values"]["messages"][0]["content"] == "what is a lease?"


async def test_thread_search_reads_a_page_in_a_fixed_number_of_queries(
    app_factory: AppFactory,
) -> None:
    """Thin adapter: a search page (status filtered in SQL) costs the same statements for 2
    threads as for 6 (no per-thread status, run or history reads), and a status filter
    pages over every thread (no scan cap)."""
    async with app_factory(start_worker=False) as h, serve_in_loop(h.app) as url:
        client = get_client(url=url, api_key=API_KEY)
        engine = h.container.engine

        async def busy_thread(text: str) -> str:
            tid = (await client.threads.create(metadata={"batch": 1}))["thread_id"]
            posted = await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": text}, headers=AUTH
            )
            assert posted.status_code == 202, posted.text
            return tid

        async def counted_search() -> tuple[list[Any], int]:
            seen: list[str] = []

            def record(*args: Any) -> None:
                seen.append(args[2])

            event.listen(engine.sync_engine, "before_cursor_execute", record)
            try:
                found = await client.threads.search(status="busy", metadata={"batch": 1})
            finally:
                event.remove(engine.sync_engine, "before_cursor_execute", record)
            return found, len(seen)

        made = [await busy_thread(f"question {i}") for i in range(2)]
        await client.threads.create(metadata={"batch": 1})  # idle: filtered out
        few, few_statements = await counted_search()
        made += [await busy_thread(f"question {i}") for i in range(2, 6)]
        many, many_statements = await counted_search()
        assert {t["thread_id"] for t in few} == set(made[:2])
        assert {t["thread_id"] for t in many} == set(made)
        assert many_statements == few_statements
        assert all(t["status"] == "busy" for t in many)
        assert sorted(t["values"]["messages"][0]["content"] for t in many) == [
            f"question {i}" for i in range(6)
        ]
        page = await client.threads.search(status="busy", limit=2, offset=4)
        assert len(page) == 2 and await client.threads.count(status="busy") == 6
