"""The app served by a real uvicorn on 127.0.0.1 with an ephemeral port, for tests.

Why: client disconnects, schemathesis over HTTP and raw paths need a real socket, not the
ASGI-transport shortcut. ``serve_in_loop`` runs uvicorn as a task on the caller's event loop (the
test can share asyncio objects with the app); ``serve_in_thread`` runs it on its own loop in a
daemon thread (for synchronous clients such as schemathesis' ``requests``). Both run the app's
lifespan through uvicorn and shut it down gracefully on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import uvicorn

from app.config import HttpSettings, Settings
from app.http_server import build_server, server_config


def _server(app: Any) -> uvicorn.Server:
    """The production server configuration (timeouts, protocol) on an ephemeral port."""
    state = getattr(app, "state", None)
    settings = getattr(state, "settings", None)
    options: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": 0,
        "lifespan": "on",
        "timeout_graceful_shutdown": 5,
    }
    if isinstance(settings, Settings) and hasattr(state, "followers"):  # a create_app app
        return build_server(app, settings.http, **options)
    return uvicorn.Server(
        server_config(
            app, settings.http if isinstance(settings, Settings) else HttpSettings(), **options
        )
    )


def _base_url(server: uvicorn.Server) -> str:
    port = server.servers[0].sockets[0].getsockname()[1]
    return f"http://127.0.0.1:{port}"


@contextlib.asynccontextmanager
async def serve_in_loop(app: Any, *, startup_timeout: float = 30.0) -> AsyncIterator[str]:
    """Yield the base URL of ``app`` served on this loop; stop it on exit."""
    server = _server(app)
    task = asyncio.create_task(server.serve(), name="uvicorn")
    deadline = asyncio.get_running_loop().time() + startup_timeout
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("uvicorn stopped before it started")
        if asyncio.get_running_loop().time() > deadline:
            server.should_exit = True
            raise RuntimeError("uvicorn did not start in time")
        await asyncio.sleep(0.02)
    try:
        yield _base_url(server)
    finally:
        server.should_exit = True
        await task


@contextlib.contextmanager
def serve_in_thread(app: Any, *, startup_timeout: float = 30.0) -> Iterator[str]:
    """Yield the base URL of ``app`` served by uvicorn on its own loop in a daemon thread."""
    server = _server(app)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            server.run()
        except BaseException as exc:  # surfaced to the test below
            errors.append(exc)

    thread = threading.Thread(target=run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if errors or not thread.is_alive():
            raise RuntimeError(f"uvicorn stopped before it started: {errors!r}")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError("uvicorn did not start in time")
        time.sleep(0.02)
    try:
        yield _base_url(server)
    finally:
        server.should_exit = True
        thread.join(30)
