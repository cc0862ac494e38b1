"""The web console in a real browser: the app on a listening socket, Debian's chromium through
Playwright, and the steps every console test takes (open it with the key, create a thread).
The fixtures ``live_server`` and ``browser`` (tests/e2e/conftest.py) hand these out."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from playwright.async_api import Browser, Page, Request, async_playwright, expect

from app.config import Settings
from app.container import Container, build_container
from app.main import create_app
from tests.support.app_harness import API_KEY, make_settings
from tests.support.corpus import BIG_DOC

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
UI_TIMEOUT_MS = 60_000  # a hang guard: a browser on a loaded shared machine needed more than 20 s
DESKTOP, MOBILE = 1280, 390

LiveServerFactory = Callable[..., contextlib.AbstractAsyncContextManager[str]]


def live_servers(clean_db: str, tmp_path: Path) -> LiveServerFactory:
    """Starts the real app on a listening socket; yields its base URL (same DB and workdir)."""

    @contextlib.asynccontextmanager
    async def factory(*, start_worker: bool = True, **overrides: Any) -> AsyncIterator[str]:
        settings = make_settings(clean_db, tmp_path / "workdir", **overrides)

        async def container_factory(s: Settings) -> Container:
            return await build_container(s, start_worker=start_worker)

        app = create_app(settings, container_factory=container_factory)
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            lifespan="on",
            log_level="warning",
            timeout_graceful_shutdown=5,
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name="console-e2e-uvicorn", daemon=True)
        thread.start()
        try:
            deadline = asyncio.get_running_loop().time() + 30
            while not server.started:
                if not thread.is_alive() or asyncio.get_running_loop().time() > deadline:
                    raise RuntimeError("the app did not start under uvicorn")
                await asyncio.sleep(0.05)
            port = server.servers[0].sockets[0].getsockname()[1]
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            await asyncio.to_thread(thread.join, 30)

    return factory


@contextlib.asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """Debian's chromium, headless, through Playwright."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} is missing: the console tests need Debian's chromium. "
            "Install it with scripts/ensure_chromium.sh (apt-get install chromium).",
            pytrace=False,
        )
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            await b.close()


async def open_console(
    browser: Browser, base_url: str, *, width: int = DESKTOP
) -> tuple[Page, list[str]]:
    """A fresh page on ``/`` (redirects to the console), connected with the API key."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context = await browser.new_context(
        viewport={"width": width, "height": 900 if width >= DESKTOP else 844},
        reduced_motion="reduce",
        is_mobile=width < DESKTOP,
        has_touch=width < DESKTOP,
    )
    page = await context.new_page()
    page.set_default_timeout(UI_TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(base_url + "/")
    assert page.url == base_url + "/console/"
    await page.fill("#api-key", API_KEY)
    await page.click("#key-form button[type=submit]")
    await expect(page.locator("#connection")).to_have_text("connected")
    return page, errors


async def create_thread(page: Page, title: str) -> None:
    await page.fill("#new-thread-title", title)
    await page.click("#new-thread-form button[type=submit]")
    await expect(page.locator("#thread-title")).to_have_text(title)
    await expect(page.locator("#thread-list [aria-current=true]")).to_contain_text(title)


def track_requests(page: Page, url_suffix: str, method: str | None = None) -> list[Request]:
    """The page's requests (of ``method``, any if None) whose path ends with ``url_suffix``, as
    they are made."""
    seen: list[Request] = []

    def on_request(request: Request) -> None:
        if request.url.split("?")[0].endswith(url_suffix) and method in (None, request.method):
            seen.append(request)

    page.on("request", on_request)
    return seen


async def add_leases_document(client: httpx.AsyncClient) -> None:
    """The knowledge base's document on leases (``BIG_DOC``), added through the API."""
    doc = await client.post(
        "/v1/knowledge-bases/default/documents",
        json={"title": "Leases", "content": BIG_DOC, "source": "leases.md"},
    )
    assert doc.status_code == 201, doc.text
