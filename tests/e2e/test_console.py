"""The operator console in a real browser: Debian's chromium driven by Playwright.

The app runs under uvicorn on 127.0.0.1 (ephemeral port) in a background thread, against the
session's PostgreSQL, with the offline extractive model. ``playwright install`` is never used:
the browser is /usr/bin/chromium (``scripts/ensure_chromium.sh`` installs it).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
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
from tests.conftest import API_KEY, AUTH, make_settings
from tests.integration.test_context_compression import BIG_DOC

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

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
QUESTION = "How does a lease expire?"
#: Offload tool results above 300 tokens and keep little history, so compression has work to do.
COMPRESSIBLE = {"tool_result_preview_tokens": 300, "summary_keep_recent_tokens": 200}
TARGET_PRESSURE_PERCENT = 92  # above the 85% suggestion, below automatic compression (100%)
UI_TIMEOUT_MS = 20_000

LiveServerFactory = Callable[..., contextlib.AbstractAsyncContextManager[str]]


@pytest.fixture
def live_server(clean_db: str, tmp_path: Path) -> LiveServerFactory:
    """Start the real app on a listening socket; yields its base URL (same DB and workdir)."""

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


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
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


async def open_console(browser: Browser, base_url: str) -> tuple[Page, list[str]]:
    """A fresh page on ``/`` (redirects to the console), connected with the API key."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context = await browser.new_context(
        viewport={"width": 1440, "height": 900}, reduced_motion="reduce"
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


def track_requests(page: Page, url_suffix: str) -> list[Request]:
    seen: list[Request] = []

    def on_request(request: Request) -> None:
        if request.url.split("?")[0].endswith(url_suffix):
            seen.append(request)

    page.on("request", on_request)
    return seen


async def click_compress_three_times(page: Page) -> bool:
    """Three synchronous clicks; returns whether the button was disabled right after the first."""
    return await page.evaluate(  # type: ignore[no-any-return]
        """() => {
            const button = document.getElementById("compress-button");
            button.click();
            const disabledWhilePending = button.disabled;
            button.click();
            button.click();
            return disabledWhilePending;
        }"""
    )


async def pressure(page: Page) -> tuple[float, int, int]:
    """(percent shown, input tokens shown, threshold shown), all read from the page."""
    percent = (await page.locator("#pressure-value").inner_text()).rstrip("%")
    tokens = (await page.locator("#input-tokens").inner_text()).replace(",", "")
    threshold = (await page.locator("#summary-threshold").inner_text()).replace(",", "")
    return float(percent), int(tokens), int(threshold)


async def seed_and_calibrate(base_url: str) -> int:
    """Seed the knowledge base through the API, and measure one turn's next-request tokens."""
    async with httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=30) as client:
        doc = await client.post(
            "/v1/knowledge-bases/default/documents",
            json={"title": "Leases", "content": BIG_DOC, "source": "leases.md"},
        )
        assert doc.status_code == 201, doc.text
        tid = (await client.post("/v1/threads", json={"title": "calibration"})).json()["id"]
        posted = await client.post(f"/v1/threads/{tid}/messages", json={"content": QUESTION})
        assert posted.status_code == 202, posted.text
        for _ in range(300):
            runs = (await client.get(f"/v1/threads/{tid}/runs")).json()["items"]
            if runs and runs[0]["status"] in {"completed", "failed"}:
                break
            await asyncio.sleep(0.1)
        assert runs and runs[0]["status"] == "completed", runs
        state = (await client.get(f"/v1/threads/{tid}/agent-state")).json()
        assert state["summary"]["present"] is False
        return int(state["context"]["input_tokens"])


async def test_console_chat_stream_compress_and_offload(
    live_server: LiveServerFactory, browser: Browser
) -> None:
    # Calibrate with no pressure, then restart with a threshold one turn fills to ~92%: high
    # enough for the suggestion, below the automatic compression of the run itself.
    async with live_server(summary_threshold=1_000_000, **COMPRESSIBLE) as base_url:
        turn_tokens = await seed_and_calibrate(base_url)
    threshold = math.ceil(turn_tokens * 100 / TARGET_PRESSURE_PERCENT)

    async with live_server(summary_threshold=threshold, **COMPRESSIBLE) as base_url:
        page, page_errors = await open_console(browser, base_url)
        await expect(page.locator("#thread-list")).to_contain_text("calibration")
        await create_thread(page, "Lease questions")

        # Chat: the answer streams in over SSE, with the tool call and its result.
        event_streams = track_requests(page, "/events")
        await page.fill("#message-input", QUESTION)
        await page.click("#send-button")
        await expect(page.locator("#transcript .msg-user")).to_have_text(re.compile(QUESTION))
        await expect(page.locator("#transcript .tool-call")).to_contain_text("query_kb")
        await expect(page.locator("#transcript .msg-tool")).to_have_count(1)
        answer = page.locator("#transcript .msg-assistant .msg-text")
        await expect(answer).to_contain_text("[kb:")
        await expect(page.locator("#run-status")).to_have_text("completed")
        answer_text = await answer.inner_text()
        assert "lease" in answer_text.lower()
        assert await page.locator("#transcript .cite").count() >= 1
        assert event_streams, "the answer must arrive over the run's SSE stream"
        assert (await event_streams[0].all_headers())["authorization"] == f"Bearer {API_KEY}"

        # Pressure: high and flagged, consistent with the numbers shown.
        await expect(page.locator("#suggestion")).to_be_visible()
        before_percent, before_tokens, shown_threshold = await pressure(page)
        assert shown_threshold == threshold
        assert before_percent >= 85.0, (before_percent, before_tokens, threshold)
        assert before_percent == pytest.approx(100 * before_tokens / threshold, abs=0.051)
        await expect(page.locator("#pressure-bar")).to_have_attribute("data-level", "high")
        await expect(page.locator("#manual-availability")).to_have_text("available")
        await page.screenshot(path=str(ARTIFACTS / "console-pressure.png"), full_page=True)

        # Compress: one request however often it is clicked, then the re-read state.
        compress_requests = track_requests(page, "/context/compress")
        assert await click_compress_three_times(page) is True
        result = page.locator("#compress-result")
        await expect(result).to_have_attribute("data-state", "ok")
        await expect(result).to_contain_text("Compressed:")
        await expect(page.locator("#compress-button")).to_be_enabled()
        assert len(compress_requests) == 1, compress_requests
        await expect(page.locator("#suggestion")).to_be_hidden()
        after_percent, after_tokens, _ = await pressure(page)
        assert after_tokens < before_tokens
        assert after_percent < before_percent
        assert after_percent == pytest.approx(100 * after_tokens / threshold, abs=0.051)
        await expect(result).to_contain_text(f"{before_tokens:,} → {after_tokens:,} tokens")
        await expect(page.locator("#pressure-bar")).to_have_attribute("data-level", "ok")

        # The offloaded tool result links to its full original, checked against its SHA-256.
        assert int(await page.locator("#offloaded-count").inner_text()) >= 1
        link = page.locator("#transcript .msg-tool .offload-link")
        await expect(link).to_have_count(1)
        await page.screenshot(path=str(ARTIFACTS / "console.png"), full_page=True)

        await link.click()
        dialog = page.locator("#file-dialog")
        await expect(dialog).to_be_visible()
        await expect(page.locator("#file-verified")).to_have_text("verified")
        path = await page.locator("#file-title").inner_text()
        sha = await page.locator("#file-sha").inner_text()
        async with httpx.AsyncClient(base_url=base_url, headers=AUTH) as client:
            tid = (await client.get("/v1/threads", params={"limit": 1})).json()["items"][0]["id"]
            original = await client.get(f"/v1/threads/{tid}/workdir/{path}")
        assert original.headers["x-content-sha256"] == sha
        assert await page.locator("#file-content").inner_text() == original.text
        await page.screenshot(path=str(ARTIFACTS / "console-offload.png"))
        await dialog.locator("button").click()
        await expect(dialog).to_be_hidden()

        assert page_errors == []
        await page.context.close()


async def test_console_compress_reports_nothing_to_compress_and_thread_busy(
    live_server: LiveServerFactory, browser: Browser
) -> None:
    # No worker: a posted message stays queued, so the thread is busy.
    async with live_server(start_worker=False) as base_url:
        page, page_errors = await open_console(browser, base_url)
        await create_thread(page, "Busy thread")
        compress_requests = track_requests(page, "/context/compress")
        result = page.locator("#compress-result")

        await page.click("#compress-button")
        await expect(result).to_have_attribute("data-state", "info")
        await expect(result).to_contain_text("nothing_to_compress")

        await page.fill("#message-input", "Are you there?")
        await page.click("#send-button")
        await expect(page.locator("#run-status")).to_have_text("queued")
        await expect(page.locator("#manual-availability")).to_contain_text("thread_busy")

        assert await click_compress_three_times(page) is True
        await expect(result).to_have_attribute("data-state", "busy")
        await expect(result).to_contain_text("thread_busy")
        await expect(result).to_contain_text("queued")
        await expect(page.locator("#compress-button")).to_be_enabled()
        assert len(compress_requests) == 2, compress_requests
        await page.screenshot(path=str(ARTIFACTS / "console-busy.png"), full_page=True)

        assert page_errors == []
        await page.context.close()
