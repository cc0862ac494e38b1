"""Text PostgreSQL cannot store, from tools and providers (issue 22, item 1).

A search backend that cut an emoji in half answers JSON ``"\\ud83d"``; a provider may stream the
same. The run used to fail with ``internal_error`` (asyncpg: "surrogates not allowed"), losing
the tool result, and the thread's next request carried a tool call without its result, which a
real provider refuses (the local provider here refuses it the same way, HTTP 400).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, ToolMessage

from app.compression.recall import search_workdir
from app.db.urls import libpq_url
from app.repositories.agent_state import committed_state
from tests.conftest import AUTH, AppFactory, AppHarness
from tests.support.api import add_doc, messages, new_thread
from tests.support.openai_server import OpenAICompatibleServer, assert_every_call_answered
from tests.support.search_backend import FixedSearch

pytestmark = pytest.mark.integration

#: What the backend sends: an escaped lone high surrogate (json.loads keeps it as one).
CUT_EMOJI_JSON = "cut \\ud83d"
STORED = "cut \ufffd"


#: One result whose text ends in half an emoji.
CUT_EMOJI_BODY = (
    '{"results": [{"title": "t", "url": "https://e.org", "content": "'
    + CUT_EMOJI_JSON
    + '", "score": 1}]}'
).encode()


@pytest.fixture
def search() -> Iterator[FixedSearch]:
    with FixedSearch(CUT_EMOJI_BODY) as backend:
        yield backend


def no_surrogates(text: str) -> bool:
    return not any("\ud800" <= ch <= "\udfff" for ch in text)


async def assert_view_answers_every_call(h: AppHarness, tid: str) -> list[Any]:
    """The committed model view (what the next run starts from): every call has its result."""
    agent = h.container.agent
    live = await agent.graph.aget_state(agent.config_for(tid))
    view = (await committed_state(agent.graph, live)).values["messages"]
    calls = [c["id"] for m in view if isinstance(m, AIMessage) for c in m.tool_calls]
    results = [m.tool_call_id for m in view if isinstance(m, ToolMessage)]
    assert calls and sorted(calls) == sorted(results), view
    return list(view)


async def post_and_wait(h: AppHarness, tid: str, text: str, exclude: set[str]) -> dict[str, Any]:
    await h.client.post(f"/v1/threads/{tid}/messages", json={"content": text}, headers=AUTH)
    return await h.wait_for_run(tid, statuses={"completed", "failed"}, exclude=exclude)


async def test_cut_emoji_in_a_tool_result_is_stored_and_the_thread_goes_on(
    app_factory: AppFactory, search: FixedSearch
) -> None:
    with OpenAICompatibleServer() as llm:
        async with app_factory(
            llm_base_url=llm.base_url, llm_api_key="k", web_search_url=search.url
        ) as h:
            llm.enqueue_tool_call("web_search", {"query": "emoji"})
            llm.enqueue_text("It was cut.")
            tid = await new_thread(h)
            run = await post_and_wait(h, tid, "search it", set())
            assert run["status"] == "completed", (run["error_code"], run["error"])

            history = await messages(h, tid)
            assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
            tool = history[2]
            assert json.loads(tool["content"])["results"][0]["content"] == STORED
            # The model view holds the same text (the checkpoint would have made it "?").
            view = await assert_view_answers_every_call(h, tid)
            assert [m.content for m in view if isinstance(m, ToolMessage)] == [tool["content"]]
            state = (await h.client.get(f"/v1/threads/{tid}/agent-state", headers=AUTH)).json()
            assert [m["content"] for m in state["messages"] if m["type"] == "tool"] == [
                tool["content"]
            ]
            # The run's message events name the stored messages (not a copy of the text).
            events = await h.sse_events(run["id"])
            streamed = [e["data"] for e in events if e["event"] == "message"]
            assert [e["message_id"] for e in streamed if e["role"] == "tool"] == [tool["id"]]
            # The model was shown the result, and the thread's next request is valid.
            assert STORED in llm.requests[1]["messages"][-1]["content"]
            nxt = await post_and_wait(h, tid, "and then?", {run["id"]})
            assert nxt["status"] == "completed", (nxt["error_code"], nxt["error"])
            assert len(llm.requests) == 3
            assert_every_call_answered(llm)


async def test_cut_emoji_in_the_model_answer_and_arguments_is_stored(
    app_factory: AppFactory,
) -> None:
    with OpenAICompatibleServer() as llm:
        async with app_factory(llm_base_url=llm.base_url, llm_api_key="k") as h:
            await add_doc(h)
            llm.enqueue_tool_call("query_kb", {"query": "lease \ud83d"})
            llm.enqueue_text("Leases expire \ud83d without heartbeats.")
            tid = await new_thread(h)
            run = await post_and_wait(h, tid, "lease?", set())
            assert run["status"] == "completed", (run["error_code"], run["error"])

            history = await messages(h, tid)
            assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
            assert history[1]["tool_calls"][0]["args"] == {"query": "lease \ufffd"}
            # The tool got the storable argument (a surrogate fails its own SQL query).
            assert json.loads(history[2]["content"])["query"] == "lease \ufffd"
            answer = "Leases expire \ufffd without heartbeats."
            assert history[3]["content"] == answer
            events = await h.sse_events(run["id"])
            deltas = "".join(e["data"]["text"] for e in events if e["event"] == "delta")
            assert deltas == answer
            view = await assert_view_answers_every_call(h, tid)
            assert view[-1].content == answer
            for m in history:
                assert no_surrogates(m["content"]) and no_surrogates(json.dumps(m))


async def test_repair_reads_the_committed_state_and_keeps_a_finished_tool_result(
    app_factory: AppFactory, clean_db: str, search: FixedSearch
) -> None:
    """A run that fails after its tool finished but before the step was checkpointed (here the
    tool message insert is refused by a trigger, as the surrogate used to be): the tool's
    result exists only as a saved task write. The next run used to see it in the "live" state,
    repair nothing, and start from a checkpoint without it: the provider got the call alone."""
    refuse = (
        "CREATE FUNCTION refuse_tool_rows() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'tool rows refused'; END $$; "
        "CREATE TRIGGER refuse_tool_rows BEFORE INSERT ON messages FOR EACH ROW "
        "WHEN (NEW.role = 'tool') EXECUTE FUNCTION refuse_tool_rows()"
    )
    with OpenAICompatibleServer() as llm:
        async with app_factory(
            llm_base_url=llm.base_url, llm_api_key="k", web_search_url=search.url
        ) as h:
            llm.enqueue_tool_call("web_search", {"query": "emoji"})
            llm.enqueue_text("unused: the run fails before")
            tid = await new_thread(h)
            with psycopg.connect(libpq_url(clean_db), autocommit=True) as conn:
                conn.execute(refuse)
                try:
                    first = await post_and_wait(h, tid, "search it", set())
                finally:
                    conn.execute("DROP TRIGGER refuse_tool_rows ON messages")
                    conn.execute("DROP FUNCTION refuse_tool_rows()")
            assert first["status"] == "failed" and first["error_code"] == "internal_error"
            assert [m["role"] for m in await messages(h, tid)] == ["user", "assistant"]
            agent = h.container.agent
            live = await agent.graph.aget_state(agent.config_for(tid))
            committed = await committed_state(agent.graph, live)
            assert isinstance(live.values["messages"][-1], ToolMessage)  # the saved task write
            assert isinstance(committed.values["messages"][-1], AIMessage)  # not checkpointed

            llm.reset()
            llm.enqueue_text("The result was cut.")
            nxt = await post_and_wait(h, tid, "and then?", {first["id"]})
            assert nxt["status"] == "completed", (nxt["error_code"], nxt["error"])
            [request] = llm.requests
            assert_every_call_answered(llm)
            # The tool's own result, not a placeholder: it finished before the run failed.
            sent = [m for m in request["messages"] if m["role"] == "tool"]
            assert len(sent) == 1 and STORED in sent[0]["content"]
            history = await messages(h, tid)
            tools = [m for m in history if m["role"] == "tool"]
            assert [m["content"] for m in tools] == [sent[0]["content"]]
            await assert_view_answers_every_call(h, tid)


def nul_records() -> bytes:
    """Records carrying NUL bytes and half an emoji as JSON escapes (``json.loads`` turns them
    into exactly what PostgreSQL cannot store)."""
    results = [
        {
            "title": f"record\u0000{i} \ud83d",
            "url": f"https://records.example/{i}\u0000",
            "content": f"Lease record {i}\u0000 renews on heartbeat. " * 12,
            "score": 1 - i / 10,
        }
        for i in range(6)
    ]
    data = json.dumps({"query": "records", "results": results}).encode()
    assert b"\\u0000" in data and b"\\ud83d" in data
    return data


async def test_nul_in_a_tool_result_is_offloaded_and_indexed(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    """Issue 30 item 7: the Workdir index insert used to fail on the NUL the result's JSON
    carried (``cannot index 1 originals: DBAPIError``), so every CompressContext of the thread
    answered 507 workdir_unavailable and no compression could ever offload that result. The
    index stores what the Workdir stores: storable text."""
    agent = {
        "id": "records",
        "model": "offline",
        "tools": ["web_search", "search_workdir", "read_workdir_file"],
        "offline_lookup_tool": "web_search",
        "compression": {"tool_result_preview_tokens": 60, "summary_keep_recent_tokens": 0},
    }
    path = tmp_path / "agents.json"
    path.write_text(json.dumps({"agents": [agent]}))
    with FixedSearch(nul_records()) as backend:
        async with app_factory(agents_file=str(path), web_search_url=backend.url) as h:
            tid = await new_thread(h)
            run = await post_and_wait(h, tid, "Which lease records renew?", set())
            assert run["status"] == "completed", (run["error_code"], run["error"])
            resp = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
            assert resp.status_code == 200, resp.text
            assert resp.json()["offloaded"] == 1
            # The index entry holds the result's identities as storable text, and a search
            # finds the original through it.
            index = await h.container.workdir.read_index(tid)
            assert len(index) == 1
            assert "\x00" not in json.dumps(index) and no_surrogates(json.dumps(index))
            hits = await search_workdir(h.container.workdir, tid, "heartbeat record")
            assert hits and hits[0].path == index[0]["path"]
