"""The models' aiohttp client (app/agents/provider_http.py) against a real local
OpenAI-protocol server: shared by what a registry builds, closed with it, and its failures named
as the SDK's default client names them (a refused or dropped connection is a connection error,
only a real timeout a timeout)."""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from collections.abc import AsyncIterator, Awaitable

import openai
import pytest
from langchain_core.messages import HumanMessage

from app.agents.models import build_chat_model
from app.agents.provider_http import SharedHttpClient, client_options, shared_http_client
from app.config import ModelSettings
from tests.support.openai_server import OpenAICompatibleServer
from tests.support.processes import free_port
from tests.support.waiting import wait_until


@pytest.fixture
async def holder() -> AsyncIterator[SharedHttpClient]:
    made = SharedHttpClient()
    yield made
    await made.aclose()


def _model(base_url: str, holder: SharedHttpClient, timeout: float = 30.0) -> object:
    settings = ModelSettings(llm_base_url=base_url, llm_timeout_seconds=timeout)
    with shared_http_client(holder):
        return build_chat_model(settings)


async def _stream(model: object) -> str:
    text = ""
    async for chunk in model.astream([HumanMessage("hello there")]):  # type: ignore[attr-defined]
        text += str(chunk.content)
    return text


async def test_models_built_in_its_scope_share_one_client_and_stream_through_it(
    provider: OpenAICompatibleServer, holder: SharedHttpClient
) -> None:
    first, second = _model(provider.base_url, holder), _model(provider.base_url, holder)
    client = holder.get()
    assert isinstance(client, openai.DefaultAioHttpClient)
    for model in (first, second):
        assert model.root_async_client._client is client  # type: ignore[attr-defined]
    provider.enqueue_text("the first answer")
    provider.enqueue_text("the second answer")
    assert await _stream(first) == "the first answer"
    assert (await second.ainvoke([HumanMessage("hi")])).content == "the second answer"  # type: ignore[attr-defined]
    session = client._transport.client
    assert not session.closed
    # Its connections carry langchain-openai's TCP options: a silent peer is noticed.
    (held,) = [proto for conns in session.connector._conns.values() for proto, _ in conns]
    sock = held.transport.get_extra_info("socket")
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    if sys.platform == "linux":
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 120_000
    await holder.aclose()
    assert session.closed  # the registry's close ends its connections


def test_outside_a_registry_a_model_keeps_the_sdks_own_client() -> None:
    assert client_options() == {}
    model = build_chat_model(ModelSettings(llm_base_url="http://127.0.0.1:1/v1"))
    assert not isinstance(model.root_async_client._client, openai.DefaultAioHttpClient)  # type: ignore[attr-defined]


async def _connection_error(call: Awaitable[str]) -> None:
    """``call`` fails with the SDK's connection error, and not its timeout subclass."""
    with pytest.raises(openai.APIConnectionError) as caught:
        await call
    assert not isinstance(caught.value, openai.APITimeoutError), repr(caught.value)


async def test_a_refused_connection_is_a_connection_error_not_a_timeout(
    holder: SharedHttpClient,
) -> None:
    await _connection_error(_stream(_model(f"http://127.0.0.1:{free_port()}/v1", holder)))


async def test_a_request_closed_unanswered_is_a_connection_error_not_a_timeout(
    provider: OpenAICompatibleServer, holder: SharedHttpClient
) -> None:
    provider.hold()
    call = asyncio.create_task(_stream(_model(provider.base_url, holder)))

    async def arrived() -> bool:
        return bool(provider.requests)

    await wait_until(arrived, "the request to reach the provider", timeout=30)
    provider.drop_held()
    await _connection_error(call)


async def test_a_stream_cut_midway_is_a_connection_error_not_a_timeout(
    provider: OpenAICompatibleServer, holder: SharedHttpClient
) -> None:
    provider.enqueue_text("one two three four five six")
    provider.drop_next(after=2)
    await _connection_error(_stream(_model(provider.base_url, holder)))


async def test_a_provider_slower_than_the_timeout_is_a_timeout(
    provider: OpenAICompatibleServer, holder: SharedHttpClient
) -> None:
    provider.hold()
    with pytest.raises(openai.APITimeoutError):
        await _stream(_model(provider.base_url, holder, timeout=0.5))
    provider.drop_held()  # its caller is gone: closed unanswered, not written to


async def test_a_proxy_from_the_environment_is_reached_the_same_way(
    holder: SharedHttpClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``HTTP_PROXY`` (the SDK's client trusts the environment): its transport is ours too, so a
    proxy that refuses is a connection error as well."""
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")
    with caplog.at_level(logging.INFO, logger="langchain_openai"):
        model = _model(f"http://127.0.0.1:{free_port()}/v1", holder)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    mounted = [t for t in holder.get()._mounts.values() if t is not None]
    assert mounted and all(type(t) is type(holder.get()._transport) for t in mounted)
    await _connection_error(_stream(model))


def test_with_openai_proxy_langchain_openai_builds_its_own_client(
    holder: SharedHttpClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``OPENAI_PROXY`` set: langchain-openai refuses a client given beside it, so none is."""
    monkeypatch.setenv("OPENAI_PROXY", f"http://127.0.0.1:{free_port()}")
    with shared_http_client(holder):
        assert client_options() == {}
    model = _model("http://127.0.0.1:1/v1", holder)  # builds: the agent starts
    assert not isinstance(model.root_async_client._client, openai.DefaultAioHttpClient)  # type: ignore[attr-defined]
