"""Real providers fail transiently; runs ride it out (issue 34).

A real local OpenAI-protocol server (tests/support/openai_server.py) answers the agent through the
real openai / langchain-openai clients: a 429 with ``Retry-After`` then a completion, a 401, a
connection dropped mid-stream, and calls held open while more runs than the pools have
connections wait on it. No timing is asserted: each test waits for conditions.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents_files import agents_file
from tests.support.api import messages, new_thread, scrape, value
from tests.support.app_harness import AUTH, AppFactory, AppHarness
from tests.support.openai_server import OpenAICompatibleServer

pytestmark = pytest.mark.integration

ANSWER = "The lease is thirty seconds long and the heartbeat renews it every five seconds [kb:1]."


def provider(srv: OpenAICompatibleServer, **overrides: Any) -> dict[str, Any]:
    return {"llm_base_url": srv.base_url, "llm_api_key": "sk-test-provider-key", **overrides}


async def post_and_wait(h: AppHarness, tid: str, text: str = "how long is the lease?") -> Any:
    posted = await h.client.post(
        f"/v1/threads/{tid}/messages", json={"content": text}, headers=AUTH
    )
    assert posted.status_code == 202, posted.text
    return await h.wait_for_run(tid, statuses={"completed", "failed"}, timeout=120)


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["event"] == kind]


async def metric(h: AppHarness, name: str, **labels: str) -> float:
    return value(await scrape(h), name, **labels)


async def test_429_then_200_completes_with_one_retry_event(app_factory: AppFactory) -> None:
    with OpenAICompatibleServer() as srv:
        srv.fail_next(429, headers=[("Retry-After", "0.2")])
        srv.enqueue_text(ANSWER)
        async with app_factory(**provider(srv)) as h:
            retries_before = await metric(
                h, "threadkeeper_provider_retries_total", kind="rate_limited"
            )
            tid = await new_thread(h)
            run = await post_and_wait(h, tid)
            assert run["status"] == "completed", run
            assert len(srv.requests) == 2  # the 429, then the same request again
            assert srv.requests[0]["messages"] == srv.requests[1]["messages"]
            retries = of_type(await h.sse_events(run["id"]), "provider_retry")
            assert retries == [
                {
                    "type": "provider_retry",
                    "outcome": "retrying",
                    "attempt": 1,
                    "wait_seconds": 0.2,  # the provider's Retry-After, honoured
                    "provider_status": 429,
                    "provider_code": "rate_limit_exceeded",
                    "model": "gpt-4o-mini",
                    "discarded_lc_id": None,
                }
            ]
            assert [m["content"] for m in await messages(h, tid)][-1] == ANSWER
            assert (
                await metric(h, "threadkeeper_provider_retries_total", kind="rate_limited")
                == retries_before + 1
            )


async def test_401_is_not_retried(app_factory: AppFactory) -> None:
    with OpenAICompatibleServer() as srv:
        srv.fail_next(401)
        srv.enqueue_text(ANSWER)  # would be answered to a retry: there must be none
        async with app_factory(**provider(srv)) as h:
            tid = await new_thread(h)
            run = await post_and_wait(h, tid)
            assert run["status"] == "failed"
            assert (run["error_code"], run["provider_status"], run["provider_code"]) == (
                "provider_error",
                401,
                "invalid_api_key",
            )
            assert len(srv.requests) == 1
            assert of_type(await h.sse_events(run["id"]), "provider_retry") == []


async def test_a_transient_failure_past_the_bound_gives_up(app_factory: AppFactory) -> None:
    with OpenAICompatibleServer() as srv:
        srv.fail_next(503, times=3, headers=[("Retry-After", "0")])
        async with app_factory(**provider(srv, llm_max_retries=2)) as h:
            tid = await new_thread(h)
            run = await post_and_wait(h, tid)
            assert run["status"] == "failed"
            assert (run["provider_status"], run["provider_code"]) == (503, "server_error")
            assert len(srv.requests) == 3  # the call and its two retries
            outcomes = [
                (e["attempt"], e["outcome"])
                for e in of_type(await h.sse_events(run["id"]), "provider_retry")
            ]
            assert outcomes == [(1, "retrying"), (2, "retrying"), (3, "gave_up")]


@pytest.mark.parametrize("flush_chars", [1, 2000], ids=["each-piece-sent", "coalesced"])
async def test_a_drop_mid_stream_does_not_duplicate_deltas(
    app_factory: AppFactory, flush_chars: int
) -> None:
    """The connection drops after three streamed words; the call is retried and answers in
    full. What a client assembles from the deltas (dropping the text a retry event voids) is
    the answer once: with every piece sent at once (the failed attempt's words went out and
    are voided) and with pieces coalesced (they never went out)."""
    with OpenAICompatibleServer() as srv:
        srv.responder = lambda request: ANSWER
        srv.drop_next(after=3)
        async with app_factory(**provider(srv, delta_flush_chars=flush_chars)) as h:
            tid = await new_thread(h)
            run = await post_and_wait(h, tid)
            assert run["status"] == "completed", run
            assert len(srv.requests) == 2
            events = await h.sse_events(run["id"])
            [retry] = of_type(events, "provider_retry")
            assert (retry["outcome"], retry["provider_status"]) == ("retrying", None)
            void = retry["discarded_lc_id"]
            shown = "".join(d["text"] for d in of_type(events, "delta") if d["lc_id"] != void)
            assert shown == ANSWER
            if flush_chars == 1:
                assert void is not None  # the failed attempt's words had gone out
                voided = "".join(d["text"] for d in of_type(events, "delta") if d["lc_id"] == void)
                assert voided and ANSWER.startswith(voided)
            assert [m["content"] for m in await messages(h, tid)][-1] == ANSWER


async def test_more_runs_than_pool_connections_complete(app_factory: AppFactory) -> None:
    """Eight runs wait on the provider at once with two connections per pool: none holds a
    connection across its model call, and all complete without a pool timeout."""
    runs = 8
    with OpenAICompatibleServer() as srv:
        srv.responder = lambda request: ANSWER
        srv.hold()
        async with app_factory(
            **provider(srv, db_pool_size=2, checkpointer_pool_size=2, db_pool_timeout_seconds=5)
        ) as h:
            threads = [await new_thread(h) for _ in range(runs)]
            for tid in threads:
                posted = await h.client.post(
                    f"/v1/threads/{tid}/messages", json={"content": "hello"}, headers=AUTH
                )
                assert posted.status_code == 202
            assert await asyncio.to_thread(srv.wait_for_requests, runs, 120.0)
            container = h.container
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            # Every run is inside its model call now: the pools go back to idle (a heartbeat
            # may hold one for an instant).
            while container.engine.pool.checkedout() or _checkpointer_in_use(container):
                assert loop.time() < deadline, "a run holds a connection across its model call"
                await asyncio.sleep(0.02)
            srv.release()
            finished = [
                await h.wait_for_run(tid, statuses={"completed", "failed"}, timeout=120)
                for tid in threads
            ]
            assert [r["status"] for r in finished] == ["completed"] * runs, finished


def _checkpointer_in_use(container: Any) -> int:
    stats = container.pool.get_stats()
    return int(stats.get("pool_size", 0)) - int(stats.get("pool_available", 0))


def file_agent(srv: OpenAICompatibleServer, monkeypatch: pytest.MonkeyPatch, **spec: Any) -> Any:
    """An agents-file agent on the stub (its key in the environment, as a deployment has it)."""
    monkeypatch.setenv("TK_TEST_PROVIDER_KEY", "sk-test-provider-key")
    return {"base_url": srv.base_url, "api_key_env": "TK_TEST_PROVIDER_KEY", **spec}


async def test_a_fallback_model_answers_when_the_agents_model_fails(
    app_factory: AppFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with OpenAICompatibleServer() as srv:
        agent = file_agent(
            srv,
            monkeypatch,
            id="steady",
            model="openai:gpt-primary",
            fallback_models=["openai:gpt-spare"],
        )
        srv.fail_next(404, {"error": {"message": "gone", "code": "model_not_found"}})
        srv.enqueue_text(ANSWER)
        async with app_factory(agents_file=agents_file(tmp_path, agent)) as h:
            resp = await h.client.post(
                "/v1/threads", json={"title": "t", "agent_id": "steady"}, headers=AUTH
            )
            tid = resp.json()["id"]
            run = await post_and_wait(h, tid)
            assert run["status"] == "completed", run
            assert [r["model"] for r in srv.requests] == ["gpt-primary", "gpt-spare"]
            assert [m["content"] for m in await messages(h, tid)][-1] == ANSWER


async def test_max_concurrency_caps_the_calls_in_flight(
    app_factory: AppFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = 4
    with OpenAICompatibleServer(latency=0.05) as srv:
        srv.responder = lambda request: ANSWER
        agent = file_agent(srv, monkeypatch, id="capped", model="openai:gpt-x", max_concurrency=1)
        async with app_factory(agents_file=agents_file(tmp_path, agent)) as h:
            threads = []
            for _ in range(runs):
                resp = await h.client.post(
                    "/v1/threads", json={"title": "t", "agent_id": "capped"}, headers=AUTH
                )
                threads.append(resp.json()["id"])
            for tid in threads:
                await h.client.post(
                    f"/v1/threads/{tid}/messages", json={"content": "hi"}, headers=AUTH
                )
            finished = [
                await h.wait_for_run(tid, statuses={"completed", "failed"}, timeout=120)
                for tid in threads
            ]
            assert [r["status"] for r in finished] == ["completed"] * runs
            assert srv.stats()["max_in_flight"] == 1
            waits = await metric(h, "threadkeeper_model_slot_wait_seconds_count")
            assert waits >= runs
