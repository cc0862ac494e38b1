"""Agents as configuration (issue 19): several agents on one server, each thread run, measured,
compressed and searched with its own agent; an agent that disappears; unknown agents."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.agents_files import agents_file
from tests.support.api import messages, run_turns, state
from tests.support.app_harness import AUTH, AppFactory, AppHarness
from tests.support.summarizers import CountingSummarizer

pytestmark = pytest.mark.integration

ALPHA_DOC = "The alpha handbook says a lease expires after thirty seconds without heartbeats."
BETA_DOC = "The beta handbook says a lease expires when its worker stops renewing it."
DEFAULT_DOC = "The default handbook says a lease expires at midnight."


ALPHA = {
    "id": "alpha",
    "name": "Alpha",
    "description": "small budget, Workdir tools",
    "model": "offline",
    "knowledge_base": "kb-alpha",
    "compression": {
        "summary_threshold": 1700,
        "tool_result_preview_tokens": 300,
        "summary_keep_recent_tokens": 200,
        "summary_max_tokens": 200,
    },
}
BETA = {
    "id": "beta",
    "name": "Beta",
    "description": "large budget, query_kb and a Python tool",
    "model": "offline",
    "knowledge_base": "kb-beta",
    "tools": ["query_kb"],
    "python_tools": ["examples.tools:word_count"],
    "compression": {"summary_threshold": 50_000, "summary_keep_recent_tokens": 100},
}


async def add(h: AppHarness, kb: str, content: str) -> None:
    resp = await h.client.post(
        f"/v1/knowledge-bases/{kb}/documents", json={"title": kb, "content": content}, headers=AUTH
    )
    assert resp.status_code == 201, resp.text


async def thread_on(h: AppHarness, agent_id: str | None) -> str:
    body = {"title": str(agent_id)} | ({"agent_id": agent_id} if agent_id else {})
    resp = await h.client.post("/v1/threads", json=body, headers=AUTH)
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]  # type: ignore[no-any-return]


def padding(n: int) -> str:
    return " ".join(f"filler{i}" for i in range(n))


async def test_two_agents_each_thread_uses_its_own(app_factory: AppFactory, tmp_path: Path) -> None:
    sums = {"alpha": CountingSummarizer(terse=True), "beta": CountingSummarizer(terse=True)}
    path = agents_file(tmp_path, ALPHA, BETA)
    async with app_factory(agents_file=path, summarizer=sums) as h:
        for kb, doc in (("kb-alpha", ALPHA_DOC), ("kb-beta", BETA_DOC), ("default", DEFAULT_DOC)):
            await add(h, kb, doc)
        a, b = await thread_on(h, "alpha"), await thread_on(h, "beta")

        # query_kb searches each agent's own knowledge base.
        await run_turns(h, a, ["When does a lease expire?"])
        await run_turns(h, b, ["When does a lease expire?"])
        answer_a = (await messages(h, a))[-1]["content"]
        answer_b = (await messages(h, b))[-1]["content"]
        assert "alpha handbook" in answer_a and "beta" not in answer_a, answer_a
        assert "beta handbook" in answer_b and "alpha" not in answer_b, answer_b

        # Pressure is measured against each thread's own budget.
        sa, sb = await state(h, a), await state(h, b)
        assert (sa["agent_id"], sa["context"]["summary_threshold"]) == ("alpha", 1700)
        assert (sb["agent_id"], sb["context"]["summary_threshold"]) == ("beta", 50_000)

        # The automatic path: alpha's small budget summarizes with alpha's summarizer only.
        turns = [f"When does a lease expire? {padding(150)}" for _ in range(4)]
        await run_turns(h, a, turns)
        await run_turns(h, b, turns)
        assert sums["alpha"].calls >= 1
        assert sums["beta"].calls == 0
        assert (await state(h, a))["summary"]["present"] is True
        assert (await state(h, b))["summary"]["present"] is False

        # The manual path on beta's thread: beta's summarizer, alpha's untouched.
        alpha_calls = sums["alpha"].calls
        resp = await h.client.post(f"/v1/threads/{b}/context/compress", headers=AUTH)
        assert resp.status_code == 200, resp.text
        assert resp.json()["summarized"] is True
        assert sums["beta"].calls == 1 and sums["alpha"].calls == alpha_calls


async def test_list_and_get_agents(app_factory: AppFactory, tmp_path: Path) -> None:
    path = agents_file(tmp_path, ALPHA, BETA)
    async with app_factory(agents_file=path) as h:
        listed = (await h.client.get("/v1/agents", headers=AUTH)).json()
        assert [a["id"] for a in listed["items"]] == ["alpha", "beta"]
        assert listed["default_agent_id"] == "alpha"  # no "default" in the file: the first
        beta = (await h.client.get("/v1/agents/beta", headers=AUTH)).json()
        assert beta["name"] == "Beta" and beta["model"] == "offline"
        assert beta["knowledge_base"] == "kb-beta"
        assert beta["capabilities"] == ["manual_compression"]
        assert beta["budget"]["summary_threshold"] == 50_000
        assert beta["budget"]["summary_keep_recent_tokens"] == 100
        tools = {t["name"]: t for t in beta["tools"]}
        assert set(tools) == {"query_kb", "word_count"}
        assert tools["word_count"]["parameters"]["properties"]["text"]["type"] == "string"
        assert "runtime" not in tools["query_kb"]["parameters"]["properties"]
        assert beta["available"] is True and beta["unavailable_reason"] is None
        missing = await h.client.get("/v1/agents/nobody", headers=AUTH)
        assert missing.status_code == 404 and missing.json()["error"] == "not_found"
        # A thread that names no agent gets the default one.
        tid = await thread_on(h, None)
        thread = (await h.client.get(f"/v1/threads/{tid}", headers=AUTH)).json()
        assert thread["agent_id"] == "alpha"


async def test_without_a_file_the_builtin_default_agent(app_factory: AppFactory) -> None:
    async with app_factory(summary_threshold=7000) as h:
        listed = (await h.client.get("/v1/agents", headers=AUTH)).json()
        assert [a["id"] for a in listed["items"]] == ["default"]
        (agent,) = listed["items"]
        assert agent["model"] == "offline" and agent["budget"]["summary_threshold"] == 7000
        assert {t["name"] for t in agent["tools"]} == {
            "query_kb",
            "read_workdir_file",
            "search_workdir",
        }


async def test_unknown_agent_is_422(app_factory: AppFactory) -> None:
    async with app_factory() as h:
        resp = await h.client.post("/v1/threads", json={"agent_id": "researcher"}, headers=AUTH)
        assert resp.status_code == 422
        assert resp.json()["error"] == "unknown_agent"
        assert (await h.client.get("/v1/threads", headers=AUTH)).json()["items"] == []
        doc = (await h.client.get("/schema/openapi.json")).json()
        codes = doc["components"]["schemas"]["ErrorCode"]["enum"]
        assert {"unknown_agent", "agent_unavailable", "not_supported"} <= set(codes)
        create = doc["paths"]["/v1/threads"]["post"]
        assert "422" in create["responses"]


async def test_agent_without_the_capability(app_factory: AppFactory, tmp_path: Path) -> None:
    plain = {"id": "plain", "model": "offline", "capabilities": []}
    async with app_factory(agents_file=agents_file(tmp_path, plain)) as h:
        tid = await thread_on(h, "plain")
        await run_turns(h, tid, ["hello there"])
        manual = (await state(h, tid))["capabilities"]["manual_compression"]
        assert manual["available"] is False and manual["reason"] == "not_supported"
        resp = await h.client.post(f"/v1/threads/{tid}/context/compress", headers=AUTH)
        assert resp.status_code == 422 and resp.json()["error"] == "not_supported"


async def test_agent_removed_between_restarts(app_factory: AppFactory, tmp_path: Path) -> None:
    both = agents_file(tmp_path, ALPHA, BETA, name="both.json")
    only_alpha = agents_file(tmp_path, ALPHA, name="alpha.json")
    async with app_factory(agents_file=both) as h:
        gone = await thread_on(h, "beta")
        kept = await thread_on(h, "alpha")
        await run_turns(h, gone, ["When does a lease expire?"])
    async with app_factory(agents_file=only_alpha) as h:
        # The thread still reads: its history, its stored view.
        thread = (await h.client.get(f"/v1/threads/{gone}", headers=AUTH)).json()
        assert thread["agent_id"] == "beta"
        assert len(await messages(h, gone)) >= 2
        st = await state(h, gone)
        assert st["agent_id"] == "beta" and st["messages"]
        manual = st["capabilities"]["manual_compression"]
        assert manual["available"] is False and manual["reason"] == "agent_unavailable"
        assert "beta" in manual["detail"]
        # Its runs fail with agent_unavailable; compression says why.
        before = set(await h.run_ids(gone))
        resp = await h.client.post(
            f"/v1/threads/{gone}/messages", json={"content": "again?"}, headers=AUTH
        )
        assert resp.status_code == 202, resp.text
        run = await h.wait_for_run(gone, statuses={"completed", "failed"}, exclude=before)
        assert run["status"] == "failed" and run["error_code"] == "agent_unavailable"
        resp = await h.client.post(f"/v1/threads/{gone}/context/compress", headers=AUTH)
        assert resp.status_code == 409 and resp.json()["error"] == "agent_unavailable"
        # Nothing else breaks: the other agent's thread runs, the gone one can be deleted.
        await run_turns(h, kept, ["When does a lease expire?"])
        assert (await h.client.delete(f"/v1/threads/{gone}", headers=AUTH)).status_code == 204
