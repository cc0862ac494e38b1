"""The uvicorn server the service runs under: bounded connection lifetimes, JSON errors.

uvicorn keeps a connection that never finishes its request head open forever (its only timer is
the keep-alive one, armed after a response), so a slow or stalled client holds a socket and a
slot indefinitely. ``GuardedHttpToolsProtocol`` arms a header timer when a connection opens and
whenever a new request starts arriving, and closes the connection with a ``408`` if the head is
not complete in time. A head larger than ``max_head_bytes`` gets a ``431`` and the connection is
closed (llhttp itself has no limit: it buffered a 64 MB header line, anonymously). Requests the
parser rejects as malformed HTTP get the service's JSON error body instead of uvicorn's plain
text. It is uvicorn's httptools protocol (llhttp, in C: the h11 one in pure Python cost about a
fifth of PostMessage's CPU). Used by ``python -m app serve``, the tests' live server and the
intake benchmark, so what is tested and measured is what runs.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.api.error_codes import status_of
from app.config import HttpSettings
from app.gc_policy import serving_gc


def _raw_response(code: str, detail: str) -> bytes:
    """A complete ``Connection: close`` response in the API's ``{"error", "detail"}`` shape, at
    the code's one status."""
    status = HTTPStatus(status_of(code))
    body = json.dumps({"error": code, "detail": detail, "fields": None}).encode()
    head = (
        f"HTTP/1.1 {status.value} {status.phrase}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class RequestHeadTooLarge(Exception):
    """A complete request head over ``max_head_bytes`` (raised inside llhttp's callback)."""


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a request-head timeout, a head size limit and JSON
    400/408/431 answers."""

    #: Seconds from the first byte of a request (or the connection) to its complete head.
    header_timeout: float = 10.0
    #: Bytes a request head (request line and headers) may take.
    max_head_bytes: int = 65_536

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        #: No complete request head yet for the current request (or none started).
        self._awaiting_head = True
        #: Bytes received since the last complete head, while not inside a request body.
        self._head_bytes = 0
        self._in_body = False
        self._head_too_large = False

    def data_received(self, data: bytes) -> None:
        # A head still arriving: counted per read before parsing, so a client can make llhttp
        # buffer at most the limit plus one read. (A head that completes within a read is
        # measured in ``on_headers_complete`` instead: completing resets this count.)
        if not self._in_body:
            self._head_bytes += len(data)
        super().data_received(data)
        if not self._in_body and self._head_bytes > self.max_head_bytes:
            self._refuse_large_head()

    def on_message_complete(self) -> None:
        self._in_body = False  # what follows is the next request's head
        super().on_message_complete()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        # The first bytes of a request (after keep-alive idling, or pipelined).
        self._awaiting_head = True
        if self._header_timer is None:
            self._arm_header_timer()
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._awaiting_head = False
        self._head_bytes = 0
        self._in_body = True
        self._disarm_header_timer()
        head = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if head > self.max_head_bytes:
            # Raising stops llhttp (nothing more of this connection is parsed) and reaches
            # uvicorn as a parser error, which calls ``send_400_response``: the 431 is sent there.
            self._head_too_large = True
            raise RequestHeadTooLarge(head)
        super().on_headers_complete()

    def _refuse_large_head(self) -> None:
        self._disarm_header_timer()
        self._head_bytes = 0
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:
            self.transport.write(
                _raw_response(
                    "request_header_too_large",
                    f"request head larger than {self.max_head_bytes} bytes",
                )
            )
        # else: a response is still being written on this connection; an error written now
        # would be spliced into it, so the oversized pipelined request only closes it.
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """Malformed HTTP (bad request line, header syntax...): our JSON error, then close."""
        if self._head_too_large:
            self._refuse_large_head()
            return
        self._disarm_header_timer()  # uvicorn has already logged ``msg``
        self.transport.write(_raw_response("validation_error", "malformed HTTP request"))
        self.transport.close()

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout, self._header_timed_out)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timed_out(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or not self._awaiting_head:
            return
        self.transport.write(_raw_response("request_timeout", "request head not received in time"))
        self.transport.close()


def protocol_class(settings: HttpSettings) -> type[GuardedHttpToolsProtocol]:
    """``GuardedHttpToolsProtocol`` bound to this deployment's header timeout and head limit."""
    return type(
        "GuardedHttpToolsProtocol",
        (GuardedHttpToolsProtocol,),
        {
            "header_timeout": settings.http_header_timeout_seconds,
            "max_head_bytes": settings.http_max_head_bytes,
        },
    )


def server_config(app: Any, settings: HttpSettings, **overrides: Any) -> uvicorn.Config:
    """The uvicorn configuration of the service (``overrides``: host, port, lifespan...)."""
    options: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "http": protocol_class(settings),
        "timeout_keep_alive": settings.http_keep_alive_seconds,
        # Unset, uvicorn waits for every connection forever, and the lifespan's end (the
        # in-process worker's drain/handoff) comes only after that.
        "timeout_graceful_shutdown": settings.http_shutdown_timeout_seconds,
        "log_config": None,
        "access_log": False,
    }
    options.update(overrides)
    return uvicorn.Config(app, **options)


class ServiceServer(uvicorn.Server):
    """uvicorn's server that tells the app when shutdown starts (``on_shutdown``), before it
    waits for connections: SSE streams and long-polls never end on their own (keep-alive
    comments keep them open), so they must end cleanly first, or the wait lasts until
    ``timeout_graceful_shutdown`` cuts them mid-response."""

    def __init__(
        self, config: uvicorn.Config, on_shutdown: Callable[[], None], *, owns_process: bool = False
    ) -> None:
        super().__init__(config)
        self.on_shutdown = on_shutdown
        self.owns_process = owns_process

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.owns_process and not self.should_exit:
            # After the lifespan built the container: its objects live as long as the process.
            serving_gc()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.on_shutdown()
        await super().shutdown(sockets)


def build_server(
    app: Any, settings: HttpSettings, *, owns_process: bool = False, **overrides: Any
) -> ServiceServer:
    """The service's server for ``app`` (a ``create_app`` app: its followers end at shutdown);
    ``owns_process`` when it is the process: the serving GC policy (app/gc_policy.py), never
    in a test's process."""
    return ServiceServer(
        server_config(app, settings, **overrides),
        on_shutdown=app.state.followers.close,
        owns_process=owns_process,
    )
