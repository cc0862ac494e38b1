"""The console when the operator is faster than the page: a message sent while a thread opens.

A CI run once saw the answer twice (``#transcript .msg-assistant .msg-text`` resolved to two
elements): the message had been sent while the new thread's history and runs were still being
read, so the page could read the same turn twice (history and stream, or two readers of one run).
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from playwright.async_api import Browser, Route, expect

from tests.support.app_harness import AUTH
from tests.support.console import (
    LiveServerFactory,
    add_leases_document,
    create_thread,
    open_console,
    track_requests,
)

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

#: Counts, on every change of the transcript, the answers shown; keeps the largest count.
WATCH_ANSWERS = """() => {
    window.__maxAnswers = 0;
    const transcript = document.getElementById("transcript");
    const count = () => {
        const n = transcript.querySelectorAll(".msg-assistant .msg-text").length;
        window.__maxAnswers = Math.max(window.__maxAnswers, n);
    };
    new MutationObserver(count).observe(transcript, { childList: true, subtree: true });
}"""


async def test_a_message_sent_while_the_thread_opens_waits_and_is_answered_once(
    live_server: LiveServerFactory, browser: Browser
) -> None:
    async with live_server() as base_url:
        async with httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=30) as client:
            await add_leases_document(client)
        page, page_errors = await open_console(browser, base_url)

        # The new thread's history read is held until the test lets it go.
        release = asyncio.Event()
        held: list[str] = []

        async def hold_history(route: Route) -> None:
            if route.request.method == "GET" and not release.is_set():
                held.append(route.request.url)
                await release.wait()
            await route.continue_()

        await page.route("**/v1/threads/*/messages*", hold_history)
        posts = track_requests(page, "/messages", method="POST")
        await page.evaluate(WATCH_ANSWERS)

        await create_thread(page, "Quick typist")
        await page.fill("#message-input", "How does a lease expire?")
        await page.click("#send-button")
        await expect(page.locator("#run-status")).to_have_text("sending…")
        # While the thread is being opened the message waits in the page: not sent. (Sent at once,
        # the extractive model answers it within this wait, before the history is read.)
        await asyncio.sleep(1.5)
        assert held, "the history read was not held: the test holds the wrong route"
        assert posts == [], "the message went out before the thread was open"

        release.set()
        await expect(page.locator("#run-status")).to_have_text("completed")
        assert len(posts) == 1
        await expect(page.locator("#transcript .msg-user")).to_have_count(1)
        await expect(page.locator("#transcript .msg-tool")).to_have_count(1)
        answer = page.locator("#transcript .msg-assistant .msg-text")
        await expect(answer).to_have_count(1)
        await expect(answer).to_contain_text("[kb:")
        await expect(page.locator("#transcript .msg-streaming")).to_have_count(0)
        assert await page.evaluate("() => window.__maxAnswers") == 1
        await expect(page.locator("#message-input")).to_have_value("")
        assert page_errors == []
        await page.context.close()
