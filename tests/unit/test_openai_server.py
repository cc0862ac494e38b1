"""The local OpenAI-compatible server, driven by the real openai / langchain-openai clients."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from app.agents.models import build_chat_model, build_summarizer
from app.compression.summarizers import LLMSummarizer, SummarizerError
from app.compression.tokens import count_tokens
from app.config import load_settings
from app.offline.extractive import ExtractiveChatModel
from app.offline.summarizer import ExtractiveSummarizer
from tests.support.openai_server import OpenAICompatibleServer, count_prompt_tokens

API_KEY = "sk-test-key"
STUB = Path(__file__).resolve().parents[1] / "support" / "openai_server.py"


@pytest.fixture
def srv() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer(context_window=200, api_key=API_KEY) as server:
        yield server


def _chat(srv: OpenAICompatibleServer) -> ChatOpenAI:
    settings = load_settings({}, llm_base_url=srv.base_url, llm_api_key=API_KEY, llm_model="m-1")
    model = build_chat_model(settings.models)
    assert isinstance(model, ChatOpenAI)
    return model


@tool
def query_kb(query: str) -> str:
    """Search the knowledge base."""
    return json.dumps({"query": query, "count": 0, "results": []})


@pytest.mark.asyncio
async def test_plain_text_and_usage(srv: OpenAICompatibleServer) -> None:
    srv.enqueue_text("Hello from the server.")
    reply = await _chat(srv).ainvoke([HumanMessage("Say hello")])
    assert reply.content == "Hello from the server."
    assert reply.usage_metadata is not None
    assert reply.usage_metadata["input_tokens"] == count_tokens("Say hello")
    assert reply.usage_metadata["output_tokens"] == count_tokens("Hello from the server.")
    body = srv.requests[-1]
    assert body["model"] == "m-1"
    assert body["messages"] == [{"role": "user", "content": "Say hello"}]
    # Queue empty: deterministic echo of the last user message.
    echo = await _chat(srv).ainvoke([HumanMessage("ping")])
    assert echo.content == "Echo: ping"


@pytest.mark.asyncio
async def test_tool_call_round_trip(srv: OpenAICompatibleServer) -> None:
    srv.enqueue_tool_call("query_kb", {"query": "leases"}, call_id="call_abc")
    model = _chat(srv).bind_tools([query_kb])
    reply = await model.ainvoke([HumanMessage("look up leases")])
    assert reply.tool_calls == [
        {"name": "query_kb", "args": {"query": "leases"}, "id": "call_abc", "type": "tool_call"}
    ]
    assert srv.requests[-1]["tools"][0]["function"]["name"] == "query_kb"
    srv.enqueue_text("Done.")
    final = await model.ainvoke(
        [
            HumanMessage("look up leases"),
            reply,
            ToolMessage('{"count": 0}', tool_call_id="call_abc"),
        ]
    )
    assert final.content == "Done."
    sent = srv.requests[-1]["messages"]
    assert sent[1]["tool_calls"][0]["id"] == "call_abc"
    assert sent[2] == {"role": "tool", "content": '{"count": 0}', "tool_call_id": "call_abc"}


@pytest.mark.asyncio
async def test_tool_call_without_its_result_is_refused_like_a_real_provider(
    srv: OpenAICompatibleServer,
) -> None:
    srv.enqueue_tool_calls([("query_kb", {"query": "a"}), ("query_kb", {"query": "b"})])
    model = _chat(srv).bind_tools([query_kb])
    reply = await model.ainvoke([HumanMessage("look up")])
    first, second = (c["id"] for c in reply.tool_calls)
    half = [HumanMessage("look up"), reply, ToolMessage("{}", tool_call_id=first)]
    for history, missing in [
        ([HumanMessage("look up"), reply, HumanMessage("and?")], f"{first}, {second}"),
        ([*half, HumanMessage("and?")], second),
    ]:
        with pytest.raises(openai.BadRequestError) as info:
            await model.ainvoke(history)
        assert info.value.status_code == 400
        assert info.value.body["message"].endswith(  # type: ignore[index]
            f"did not have response messages: {missing}"
        )
    assert srv.pending_replies == 0 and len(srv.requests) == 3  # refused, yet recorded
    srv.enqueue_text("fine")
    answered = [*half, ToolMessage("{}", tool_call_id=second), HumanMessage("and?")]
    assert (await model.ainvoke(answered)).content == "fine"
    # A surrogate (an emoji cut in half) reaches the client as the provider sent it.
    srv.enqueue_text("cut \ud83d")
    assert (await model.ainvoke([HumanMessage("x")])).content == "cut \ud83d"


@pytest.mark.asyncio
async def test_streaming_text_and_tool_calls_with_usage(srv: OpenAICompatibleServer) -> None:
    model = _chat(srv)
    srv.enqueue_text("One two three four.")
    merged: AIMessageChunk | None = None
    count = 0
    async for chunk in model.astream([HumanMessage("count")]):
        count += 1
        merged = chunk if merged is None else merged + chunk
    assert merged is not None and count > 4
    assert merged.content == "One two three four."
    assert merged.usage_metadata is not None
    assert merged.usage_metadata["input_tokens"] == count_tokens("count")
    assert merged.usage_metadata["output_tokens"] == count_tokens("One two three four.")
    request = srv.requests[-1]
    assert request["stream"] is True and request["stream_options"] == {"include_usage": True}

    srv.enqueue_tool_calls([("query_kb", {"query": "a long query text"}), ("query_kb", {"q": 2})])
    merged = None
    async for chunk in model.bind_tools([query_kb]).astream([HumanMessage("x")]):
        merged = chunk if merged is None else merged + chunk
    assert merged is not None
    assert [c["args"] for c in merged.tool_calls] == [{"query": "a long query text"}, {"q": 2}]
    assert merged.response_metadata["finish_reason"] == "tool_calls"


@pytest.mark.asyncio
async def test_context_overflow_is_a_bad_request_with_the_openai_code(
    srv: OpenAICompatibleServer,
) -> None:
    text = "lease " * 300
    tokens = count_prompt_tokens([{"role": "user", "content": text}])
    assert tokens > 200
    with pytest.raises(openai.BadRequestError) as info:
        await _chat(srv).ainvoke([HumanMessage(text)])
    assert info.value.status_code == 400
    assert info.value.code == "context_length_exceeded"
    assert info.value.body == {
        "message": (
            "This model's maximum context length is 200 tokens. However, your messages "
            f"resulted in {tokens} tokens. Please reduce the length of the messages."
        ),
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
    # Streaming requests overflow the same way, before any chunk.
    with pytest.raises(openai.BadRequestError):
        async for _ in _chat(srv).astream([HumanMessage(text)]):
            pass


@pytest.mark.asyncio
async def test_faults_auth_and_models(srv: OpenAICompatibleServer) -> None:
    srv.fail_next(500)
    with pytest.raises(openai.InternalServerError):
        await _chat(srv).ainvoke([HumanMessage("x")])
    srv.fail_next(429)
    with pytest.raises(openai.RateLimitError):
        await _chat(srv).ainvoke([HumanMessage("x")])
    assert (await _chat(srv).ainvoke([HumanMessage("x")])).content == "Echo: x"

    bad = ChatOpenAI(base_url=srv.base_url, api_key="wrong", model="m", max_retries=0)  # type: ignore[arg-type]
    with pytest.raises(openai.AuthenticationError):
        await bad.ainvoke([HumanMessage("x")])

    client = openai.AsyncOpenAI(base_url=srv.base_url, api_key=API_KEY, max_retries=0)
    models = await client.models.list()
    assert [m.id for m in models.data] == ["gpt-test"]
    await client.close()
    async with httpx.AsyncClient() as http:
        missing = await http.post(f"{srv.base_url}/nope", json={})
    assert missing.status_code == 404


@pytest.mark.asyncio
async def test_responder_and_block_hook(srv: OpenAICompatibleServer) -> None:
    srv.responder = lambda req: {
        "content": f"{len(req['messages'])} messages",
        "tool_calls": [],
    }
    assert (await _chat(srv).ainvoke([HumanMessage("a")])).content == "1 messages"

    srv.hold()
    before = len(srv.requests)
    task = asyncio.create_task(_chat(srv).ainvoke([HumanMessage("held")]))
    arrived = await asyncio.to_thread(srv.wait_for_requests, before + 1, 5.0)
    assert arrived
    await asyncio.sleep(0.05)
    assert not task.done()
    srv.release()
    assert (await asyncio.wait_for(task, 5)).content == "1 messages"


@pytest.mark.asyncio
async def test_pause_stream_holds_the_rest_of_a_streamed_reply(srv: OpenAICompatibleServer) -> None:
    srv.enqueue_text("one two three four five six")
    gate = srv.pause_stream(after=2, pace=0.0)
    seen: list[str] = []
    reached = asyncio.Event()

    async def read() -> None:
        async for chunk in _chat(srv).astream([HumanMessage("count")]):
            seen.append(str(chunk.content))
            if "".join(seen) == "one two three ":
                reached.set()

    task = asyncio.create_task(read())
    await asyncio.wait_for(reached.wait(), 10)  # the pieces before the gate, plus one
    await asyncio.sleep(0.2)
    assert "".join(seen) == "one two three " and not task.done()
    gate.set()
    await asyncio.wait_for(task, 10)
    assert "".join(seen) == "one two three four five six"
    # One-shot: the next reply streams straight through.
    srv.enqueue_text("a b c d")
    chunks = [str(c.content) async for c in _chat(srv).astream([HumanMessage("again")])]
    assert "".join(chunks) == "a b c d"


def test_concurrent_requests_are_served_in_parallel() -> None:
    with OpenAICompatibleServer() as server:
        server.hold()
        results: list[str] = []

        def call(i: int) -> None:
            with httpx.Client(timeout=10) as http:
                r = http.post(
                    f"{server.base_url}/chat/completions",
                    json={"model": "m", "messages": [{"role": "user", "content": f"n{i}"}]},
                )
                results.append(r.json()["choices"][0]["message"]["content"])

        threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        assert server.wait_for_requests(3, 5.0)  # all three in flight at once
        server.release()
        for t in threads:
            t.join(10)
        assert sorted(results) == ["Echo: n0", "Echo: n1", "Echo: n2"]


@pytest.mark.asyncio
async def test_create_agent_runs_against_the_server() -> None:
    with OpenAICompatibleServer(context_window=4000) as server:
        server.enqueue_tool_call("query_kb", {"query": "leases"})
        server.enqueue_text("Nothing found [kb:none].")
        settings = load_settings({}, llm_base_url=server.base_url, llm_api_key="k")
        agent = create_agent(
            model=build_chat_model(settings.models), tools=[query_kb], checkpointer=InMemorySaver()
        )
        result = await agent.ainvoke(
            {"messages": [HumanMessage("leases?")]}, {"configurable": {"thread_id": "t"}}
        )
        assert [type(m) for m in result["messages"]] == [
            HumanMessage,
            AIMessage,
            ToolMessage,
            AIMessage,
        ]
        assert result["messages"][-1].content == "Nothing found [kb:none]."
        assert server.requests[1]["messages"][-1]["role"] == "tool"


# --------------------------------------------------------------------------- summarizer
@pytest.mark.asyncio
async def test_llm_summarizer_against_the_server() -> None:
    with OpenAICompatibleServer(context_window=4000, api_key=API_KEY) as server:
        settings = load_settings(
            {},
            llm_base_url=server.base_url,
            llm_api_key=API_KEY,
            llm_model="agent-model",
            summary_model="summary-model",
        )
        summarizer = build_summarizer(settings.models, settings.compression)
        assert isinstance(summarizer, LLMSummarizer)
        server.enqueue_text("  The user studies leases [kb:c-1]; open task: explain SSE.  ")
        history = [
            HumanMessage("Explain leases."),
            AIMessage("", tool_calls=[{"name": "query_kb", "args": {"query": "x"}, "id": "c1"}]),
            ToolMessage('{"results": [{"id": "c-1"}]}', tool_call_id="c1", name="query_kb"),
            AIMessage("Leases last 30 s [kb:c-1]."),
        ]
        summary = await summarizer.asummarize(
            history, previous_summary="User is new to Threadkeeper.", max_tokens=300
        )
        assert summary == "The user studies leases [kb:c-1]; open task: explain SSE."
        request = server.requests[-1]
        assert request["model"] == "summary-model"
        # langchain-openai sends max_tokens as the newer max_completion_tokens field.
        assert request.get("max_completion_tokens", request.get("max_tokens")) == 300
        system, user = request["messages"]
        assert system["role"] == "system" and "open tasks" in system["content"]
        assert "URLs" in system["content"]
        assert (
            "<previous_summary>\nUser is new to Threadkeeper.\n</previous_summary>"
            in (user["content"])
        )
        assert "Assistant called tool query_kb with {'query': 'x'}" in user["content"]
        assert "Tool result (query_kb, call c1)" in user["content"]

        # Over-long output is cut to the bound; empty output is an error, never a summary.
        server.enqueue_text("word " * 500)
        long = await summarizer.asummarize(history, previous_summary=None, max_tokens=20)
        assert count_tokens(long) <= 20
        server.enqueue_text("   ")
        with pytest.raises(SummarizerError):
            await summarizer.asummarize(history, previous_summary=None, max_tokens=50)
        server.fail_next(500)
        with pytest.raises(openai.InternalServerError):
            await summarizer.asummarize(history, previous_summary=None, max_tokens=50)


def test_offline_defaults_without_endpoint() -> None:
    settings = load_settings({})
    assert isinstance(build_chat_model(settings.models), ExtractiveChatModel)
    assert isinstance(build_summarizer(settings.models, settings.compression), ExtractiveSummarizer)
    with OpenAICompatibleServer() as server:
        model = build_chat_model(load_settings({}, llm_base_url=server.base_url).models)
        assert isinstance(model, ChatOpenAI)
        assert model.max_retries == 0 and model.stream_usage is True
        assert model.model_name == "gpt-4o-mini"


async def test_served_apart_it_streams_fails_and_drops_like_a_provider() -> None:
    """The benchmark's provider: its own process on one event loop, latency and faults."""
    from benchmarks.common import child_server

    args = ["--latency", "0.05", "--fault-rate", "1", "--faults", "429", "--retry-after", "2"]
    with child_server(str(STUB), args, {}) as base:
        client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)
        await _until_up(base)
        with pytest.raises(openai.RateLimitError) as limited:
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        assert limited.value.response.headers["retry-after"] == "2"
    with child_server(str(STUB), ["--latency", "0.05", "--max-pieces", "3"], {}) as base:
        client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)
        await _until_up(base)
        messages: list[Any] = [{"role": "user", "content": "when?"}]
        stream = await client.chat.completions.create(model="m", messages=messages, stream=True)
        calls = [c async for c in stream]
        tool = calls[1].choices[0].delta.tool_calls
        assert tool is not None and tool[0].function is not None
        assert tool[0].function.name == "query_kb"
        messages += [
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": tool[0].id,
                        "type": "function",
                        "function": {"name": "query_kb", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": tool[0].id, "content": "[]"},
        ]
        stream = await client.chat.completions.create(model="m", messages=messages, stream=True)
        text = [
            c.choices[0].delta.content
            async for c in stream
            if c.choices and c.choices[0].delta.content
        ]
        assert len(text) == 3 and "".join(text).endswith("[kb:1].")
        async with httpx.AsyncClient() as http:
            stats = (await http.get(f"{base}/stats")).json()
        assert (stats["requests"], stats["completions"]) == (2, 2)


async def _until_up(base: str) -> None:
    async with httpx.AsyncClient() as http:
        for _ in range(600):
            try:
                if (await http.get(f"{base}/stats")).status_code == 200:
                    return
            except httpx.TransportError:
                await asyncio.sleep(0.05)
    raise AssertionError("the stub did not start")
