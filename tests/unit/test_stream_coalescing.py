"""Streamed chunks that arrived together are merged where they only extend the text or one tool
call's arguments (app/agents/stream_coalescing.py), through the lean OpenAI stream against a
real local OpenAI-protocol server; paced reads (``THREADKEEPER_LLM_STREAM_GATHER_SECONDS``) let
more of them arrive together, never before the first output nor at the end."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain_core.messages import AIMessageChunk, HumanMessage
from openai._streaming import ServerSentEvent

from app.agents.lean_openai import CoalescingStream, _coalesced
from app.agents.models import build_chat_model, init_provider_model
from app.agents.provider_http import SharedHttpClient, shared_http_client
from app.agents.stream_coalescing import carries_output, coalesce, ends, gather_next
from app.config import ModelSettings
from tests.support.openai_server import OpenAICompatibleServer


def _chunk(delta: dict[str, Any], *, finish: str | None = None, **envelope: Any) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-test",
        **envelope,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def _call(index: int, *, args: str, cid: str | None = None, name: str | None = None) -> dict:
    call: dict[str, Any] = {"index": index, "function": {"arguments": args}}
    if cid is not None:
        call.update(id=cid, type="function")
        call["function"]["name"] = name
    return {"tool_calls": [call]}


def _merged(chunks: list[dict]) -> list[dict]:
    return list(coalesce(copy.deepcopy(chunks)))


def test_text_pieces_become_one_chunk_and_the_finish_stays_apart() -> None:
    chunks = [
        _chunk({"role": "assistant", "content": ""}),
        *(_chunk({"content": word}) for word in ("The ", "lease ", "is ", "30 s.")),
        _chunk({}, finish="stop"),
        {**_chunk({}), "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}},
    ]
    out = _merged(chunks)
    assert [c["choices"][0]["delta"] if c["choices"] else None for c in out] == [
        {"role": "assistant", "content": "The lease is 30 s."},
        {},
        None,
    ]
    assert out[1]["choices"][0]["finish_reason"] == "stop"
    assert out[2]["usage"] == chunks[-1]["usage"]


def test_a_tool_calls_arguments_join_its_head_and_a_second_call_stays_apart() -> None:
    chunks = [
        _chunk({"role": "assistant", "content": ""}),
        _chunk(_call(0, args="", cid="call_a", name="query_kb")),
        _chunk(_call(0, args='{"query": ')),
        _chunk(_call(0, args='"lease"}')),
        _chunk(_call(1, args="", cid="call_b", name="web_search")),
        _chunk(_call(1, args='{"q": "x"}')),
        _chunk({"content": "text after a call"}),
    ]
    out = _merged(chunks)
    calls = [c["choices"][0]["delta"].get("tool_calls") for c in out]
    assert out[0]["choices"][0]["delta"]["role"] == "assistant"
    assert calls[0] == [
        {
            "index": 0,
            "id": "call_a",
            "type": "function",
            "function": {"name": "query_kb", "arguments": '{"query": "lease"}'},
        }
    ]
    assert calls[1][0]["id"] == "call_b"
    assert calls[1][0]["function"]["arguments"] == '{"q": "x"}'
    assert out[2]["choices"][0]["delta"] == {"content": "text after a call"}
    assert len(out) == 3


def test_only_chunks_of_the_same_envelope_and_plain_deltas_merge() -> None:
    other_id = [_chunk({"content": "a"}), _chunk({"content": "b"}, id="chatcmpl-2")]
    assert len(_merged(other_id)) == 2
    with_logprobs = [_chunk({"content": "a"}), _chunk({"content": "b"})]
    with_logprobs[1]["choices"][0]["logprobs"] = {"content": []}
    assert len(_merged(with_logprobs)) == 2
    other_role = [_chunk({"role": "assistant", "content": "a"}), _chunk({"role": "tool"})]
    assert len(_merged(other_role)) == 2
    # Padding that differs per chunk, and a role repeated with every chunk, do not prevent it.
    padded = [
        _chunk({"role": "assistant", "content": "a"}, obfuscation="x1"),
        _chunk({"role": "assistant", "content": "b"}, obfuscation="y22"),
    ]
    (one,) = _merged(padded)
    assert one["choices"][0]["delta"] == {"role": "assistant", "content": "ab"}


def test_events_other_than_plain_chunks_pass_as_they_came_in_order() -> None:
    error = ServerSentEvent(data=json.dumps({"error": {"message": "overloaded"}}))
    done = ServerSentEvent(data="[DONE]")
    events = [
        ServerSentEvent(data=json.dumps(_chunk({"content": "a"}))),
        ServerSentEvent(data=json.dumps(_chunk({"content": "b"}))),
        error,
        ServerSentEvent(data=json.dumps(_chunk({"content": "c"}))),
        done,
    ]
    out = list(_coalesced(events))
    assert out[1] is error and out[3] is done
    assert [out[0].json()["choices"][0]["delta"], out[2].json()["choices"][0]["delta"]] == [
        {"content": "ab"},
        {"content": "c"},
    ]


@pytest.fixture
async def holder() -> AsyncIterator[SharedHttpClient]:
    made = SharedHttpClient()
    yield made
    await made.aclose()


def _model(provider: OpenAICompatibleServer, holder: SharedHttpClient, gather: float = 0.0) -> Any:
    with shared_http_client(holder):
        return build_chat_model(
            ModelSettings(llm_base_url=provider.base_url, llm_stream_gather_seconds=gather)
        )


async def _chunks(model: Any) -> list[AIMessageChunk]:
    return [chunk async for chunk in model.astream([HumanMessage("hello there")])]


async def test_a_reply_read_at_once_streams_as_few_chunks_with_the_same_text(
    provider: OpenAICompatibleServer, holder: SharedHttpClient
) -> None:
    model = _model(provider, holder)
    text = " ".join(f"word{i}" for i in range(8))
    provider.latency = 0.8  # a piece per word, ~0.1 s apart: read one by one
    provider.enqueue_text(text)
    paced = await _chunks(model)
    provider.latency, provider.burst = 0.0, True
    provider.enqueue_text(text)
    burst = await _chunks(model)
    assert "".join(str(c.content) for c in paced) == text
    assert "".join(str(c.content) for c in burst) == text
    assert len(paced) > 8
    assert len(burst) <= 4  # the text, the finish, the usage


async def test_a_tool_call_read_at_once_keeps_its_id_name_and_arguments(
    provider: OpenAICompatibleServer, holder: SharedHttpClient
) -> None:
    model = _model(provider, holder).bind_tools(
        [{"type": "function", "function": {"name": "query_kb", "parameters": {}}}]
    )
    args = {"query": "the lease of a run, in seconds", "k": 5}
    provider.burst = True
    provider.enqueue_tool_call("query_kb", args)
    chunks = await _chunks(model)
    whole = chunks[0]
    for chunk in chunks[1:]:
        whole = whole + chunk
    (call,) = whole.tool_calls
    assert call["name"] == "query_kb" and call["args"] == args and call["id"]
    assert len(chunks) <= 4  # the call, the finish, the usage, langchain's last
    assert chunks[0].tool_call_chunks[0]["args"] == json.dumps(args)


def test_reads_are_paced_only_between_the_first_output_and_the_end() -> None:
    role = _chunk({"role": "assistant", "content": ""})
    text, call = _chunk({"content": "word"}), _chunk(_call(0, args="{", cid="c1", name="f"))
    finish, usage = _chunk({}, finish="stop"), {**_chunk({}), "choices": [], "usage": {"x": 1}}
    assert not carries_output(role) and carries_output(text) and carries_output(call)
    assert not carries_output(finish) and ends(finish) and ends(usage) and not ends(text)
    assert not gather_next([role], True, started=False)  # the first output is read at once
    assert gather_next([text], True, started=True)
    assert gather_next([], True, started=True)  # a read that completed no event yet
    assert not gather_next([text, finish], True, started=True)  # the end is read at once
    assert not gather_next([usage], True, started=True)
    assert not gather_next([text], False, started=True)  # [DONE] or another event came


async def test_paced_reads_bring_a_reply_in_fewer_chunks_with_the_same_text(
    provider: OpenAICompatibleServer, holder: SharedHttpClient
) -> None:
    text = " ".join(f"word{i}" for i in range(8))
    provider.latency = 0.8  # a piece per word, ~0.1 s apart
    provider.enqueue_text(text)
    at_once = await _chunks(_model(provider, holder))
    provider.enqueue_text(text)
    gathered = await _chunks(_model(provider, holder, gather=0.35))
    assert "".join(str(c.content) for c in at_once) == text
    assert "".join(str(c.content) for c in gathered) == text
    assert len(at_once) > 8
    # The first word, then each 0.35 s pause gathers about three more: a few chunks, then the
    # finish, the usage and langchain's last.
    assert len(gathered) <= 8, [c.content for c in gathered]
    assert any(c.usage_metadata for c in gathered)


def test_the_setting_paces_every_openai_model_and_is_bounded() -> None:
    settings = ModelSettings(llm_base_url="http://127.0.0.1:9/v1", llm_stream_gather_seconds=0.2)
    built = build_chat_model(settings)
    assert built.async_client.stream_cls.gather_seconds == 0.2  # type: ignore[attr-defined]
    agents_file = init_provider_model(
        "openai:gpt-test",
        base_url="http://127.0.0.1:9/v1",
        api_key="k",
        timeout=5,
        gather_seconds=0.2,
    )
    assert agents_file.async_client.stream_cls.gather_seconds == 0.2  # type: ignore[attr-defined]
    off = build_chat_model(
        ModelSettings(llm_base_url="http://127.0.0.1:9/v1", llm_stream_gather_seconds=0)
    )
    assert off.async_client.stream_cls is CoalescingStream  # type: ignore[attr-defined]
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="THREADKEEPER_LLM_STREAM_GATHER_SECONDS"):
            ModelSettings(llm_stream_gather_seconds=bad)
