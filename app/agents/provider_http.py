"""The HTTP client of the OpenAI-protocol models a registry builds: the openai SDK's aiohttp
transport (``openai[aiohttp]``), one client (one connection pool) per registry, closed with it.

Why: on the provider path every streamed chunk goes through the SDK's HTTP client; measured
side by side (``benchmarks/provider_client.py``), its default httpx2 transport costs more CPU
per streamed call than aiohttp's, and the service is CPU-bound there (docs/benchmarks.md).

Why a transport of our own over the SDK's: its aiohttp-to-httpx error map picks the first
match, so a refused connection (``ClientConnectorError``) and a server that hangs up
(``ServerDisconnectedError``), both kinds of ``ClientConnectionError``, came out as
``ConnectTimeout``, i.e. ``openai.APITimeoutError`` "Request timed out.": a run's diagnostics
said timeout for a port nobody listens on. ``_corrected`` maps them as httpx does (connect
error, remote protocol / read error); real timeouts stay timeouts. ``_Client`` gives a proxy
named by ``HTTP(S)_PROXY`` the same transport.

Only while ``shared_http_client`` is in effect (assembly, around building an agent) do models
get this client; anywhere else (``check --providers``, a test building a model) they keep the
SDK's default one, which needs no closing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar
from typing import Any

import aiohttp
import httpx2
from openai import DefaultAioHttpClient
from openai._vendor.httpx_aiohttp.transport import AiohttpTransport

__all__ = ["SharedHttpClient", "client_options", "shared_http_client"]


class SharedHttpClient:
    """One aiohttp-backed ``httpx2.AsyncClient`` for every model of a registry, made at first
    use (the aiohttp session belongs to the running loop) and closed by ``aclose``."""

    def __init__(self) -> None:
        self._client: httpx2.AsyncClient | None = None

    def get(self) -> httpx2.AsyncClient:
        if self._client is None:
            self._client = _Client()
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


_current: ContextVar[SharedHttpClient | None] = ContextVar("provider_http_client", default=None)


@contextlib.contextmanager
def shared_http_client(holder: SharedHttpClient) -> Iterator[None]:
    """Models built inside get ``holder``'s client (``client_options``)."""
    token = _current.set(holder)
    try:
        yield
    finally:
        _current.reset(token)


def client_options() -> dict[str, Any]:
    """``ChatOpenAI`` keyword arguments: the shared client when in effect, else none (the SDK's
    default client).

    Not with ``OPENAI_PROXY`` set: langchain-openai then builds a proxied client itself and
    refuses one given beside it. ``http_socket_options=()``: its socket options (TCP keepalive,
    ``TCP_USER_TIMEOUT``) are applied by our transport to the connections it opens; left at
    None, langchain-openai would build the unused sync client with them and warn that they
    shadow ``HTTP(S)_PROXY``."""
    holder = _current.get()
    if holder is None or os.environ.get("OPENAI_PROXY"):
        return {}
    return {"http_async_client": holder.get(), "http_socket_options": ()}


def _corrected(exc: httpx2.TransportError) -> httpx2.TransportError | None:
    """The httpx2 error a transport error should have been, or None when it is right."""
    cause = exc.__cause__
    if not isinstance(exc, httpx2.TimeoutException) or isinstance(cause, asyncio.TimeoutError):
        return None  # only the non-timeouts the SDK's map calls timeouts
    if isinstance(cause, aiohttp.ClientConnectorError):
        return httpx2.ConnectError(str(cause))
    if isinstance(cause, aiohttp.ServerDisconnectedError):
        return httpx2.RemoteProtocolError(str(cause) or "Server disconnected")
    if isinstance(cause, aiohttp.ClientConnectionError):
        return httpx2.ReadError(str(cause))
    return None


@contextlib.contextmanager
def _mapped_right() -> Iterator[None]:
    try:
        yield
    except httpx2.TransportError as exc:
        better = _corrected(exc)
        if better is None:
            raise
        raise better from exc.__cause__


class _Stream(httpx2.AsyncByteStream):
    """The response body, its errors mapped right (a drop mid-answer)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _mapped_right():
            async for chunk in self._inner:
                yield chunk

    async def aclose(self) -> None:
        with _mapped_right():
            await self._inner.aclose()


def _socket_options() -> tuple[tuple[int, int, int], ...]:
    """langchain-openai's TCP options for provider connections (keepalive, and on Linux
    ``TCP_USER_TIMEOUT``: a silent peer is noticed in about two minutes; its
    ``LANGCHAIN_OPENAI_TCP_*`` variables tune them), which it applies only to clients it builds."""
    try:
        from langchain_openai.chat_models._client_utils import _default_socket_options
    except ImportError:  # pragma: no cover - moved in another version: the kernel's defaults
        return ()
    return tuple(_default_socket_options())


class _Transport(AiohttpTransport):
    def get_client(self) -> aiohttp.ClientSession:
        """The SDK's TCP connector (its limit, keep-alive expiry and TLS context), its sockets
        made with ``_socket_options``."""
        if self.uds or self.client is not None:
            return super().get_client()
        options = _socket_options()

        def make_socket(addr_info: Any) -> socket.socket:
            family, type_, proto, _, _ = addr_info
            sock = socket.socket(family=family, type=type_, proto=proto)
            for level, name, value in options:
                with contextlib.suppress(OSError):
                    sock.setsockopt(level, name, value)
            return sock

        connector = aiohttp.TCPConnector(
            keepalive_timeout=self.limits.keepalive_expiry,
            ssl=self.ssl_context,
            local_addr=(self.local_address, 0) if self.local_address else None,
            limit=self.limits.max_connections or 0,
            socket_factory=make_socket,
        )
        return aiohttp.ClientSession(connector=connector)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        with _mapped_right():
            response = await super().handle_async_request(request)
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_Stream(response.stream),
            request=request,
            extensions=response.extensions,
        )


class _Client(DefaultAioHttpClient):  # type: ignore[misc, valid-type]
    """The SDK's aiohttp client (its defaults: timeout, 1000 connections) whose transports,
    a proxy's from ``HTTP(S)_PROXY`` too, are ``_Transport``."""

    def _init_transport(self, *args: Any, **options: Any) -> httpx2.AsyncBaseTransport:
        given = options.pop("transport", None)
        return given if given is not None else _Transport(*args, **options)

    def _init_proxy_transport(self, *args: Any, **options: Any) -> httpx2.AsyncBaseTransport:
        (proxy,) = args  # httpx2 passes it alone by position, the rest by name
        return _Transport(proxy=proxy, **options)
