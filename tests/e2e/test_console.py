"""The operator console in a real browser: Debian's chromium driven by Playwright.

The app runs under uvicorn on 127.0.0.1 (ephemeral port) in a background thread, against the
session's PostgreSQL, with the offline extractive model. ``playwright install`` is never used:
the browser is /usr/bin/chromium (``scripts/ensure_chromium.sh`` installs it).
"""

from __future__ import annotations

import asyncio
import math
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, Route, expect

from tests.support.app_harness import API_KEY, AUTH
from tests.support.console import (
    ARTIFACTS,
    DESKTOP,
    MOBILE,
    UI_TIMEOUT_MS,
    LiveServerFactory,
    add_leases_document,
    create_thread,
    open_console,
    track_requests,
)
from tests.support.openai_server import OpenAICompatibleServer

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

QUESTION = "How does a lease expire?"
#: Offload tool results above 300 tokens and keep little history, so compression has work to do.
COMPRESSIBLE = {"tool_result_preview_tokens": 300, "summary_keep_recent_tokens": 200}
TARGET_PRESSURE_PERCENT = 92  # above the 85% suggestion, below automatic compression (100%)
WIDTHS = pytest.mark.parametrize("width", [DESKTOP, MOBILE], ids=["desktop", "mobile"])


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
        await add_leases_document(client)
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
        # Everything that could be compressed was: the capability says so and the button obeys.
        await expect(page.locator("#manual-availability")).to_have_text(
            "unavailable (nothing_to_compress)"
        )
        await expect(page.locator("#compress-button")).to_be_disabled()
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


async def test_console_compress_is_off_with_nothing_to_compress_and_reports_thread_busy(
    live_server: LiveServerFactory, browser: Browser
) -> None:
    # No worker: a posted message stays queued, so the thread is busy.
    async with live_server(start_worker=False) as base_url:
        page, page_errors = await open_console(browser, base_url)
        await create_thread(page, "Busy thread")
        compress_requests = track_requests(page, "/context/compress")
        result = page.locator("#compress-result")

        # Nothing to compress yet: the capability is off and the button with it (no request).
        await expect(page.locator("#manual-availability")).to_have_text(
            "unavailable (empty_history)"
        )
        await expect(page.locator("#compress-button")).to_be_disabled()

        await page.fill("#message-input", "Are you there?")
        await page.click("#send-button")
        await expect(page.locator("#run-status")).to_have_text("queued")
        await expect(page.locator("#manual-availability")).to_contain_text("thread_busy")

        assert await click_compress_three_times(page) is True
        await expect(result).to_have_attribute("data-state", "busy")
        await expect(result).to_contain_text("thread_busy")
        await expect(result).to_contain_text("queued")
        await expect(page.locator("#compress-button")).to_be_enabled()
        assert len(compress_requests) == 1, compress_requests
        await page.screenshot(path=str(ARTIFACTS / "console-busy.png"), full_page=True)

        # After a reload the turn is still shown queued, and the page waits for its run.
        await page.reload()
        await expect(page.locator("#thread-title")).to_have_text("Busy thread")
        await expect(page.locator("#transcript .msg-user .turn-status")).to_have_text("queued")
        await expect(page.locator("#run-status")).to_have_text("queued")
        await expect(page.locator("#send-button")).to_be_disabled()

        assert page_errors == []
        await page.context.close()


# --- issue 14: streamed markdown answers, citations, turns, cancel/delete, mobile, docs offline ----
LEASE_URL = "https://docs.example.test/leases"
STREAMED_HEAD = "**Leases** expire after "


async def assert_fits_width(page: Page, width: int) -> None:
    """Nothing is wider than the viewport (no sideways scrolling) and the composer is reachable."""
    scroll_width = await page.evaluate("() => document.documentElement.scrollWidth")
    assert scroll_width <= width, f"page is {scroll_width}px wide in a {width}px viewport"
    for selector in ("#send-button", "#message-input", "#compress-button", "#thread-list"):
        box = await page.locator(selector).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, selector


async def seed_cited_docs(base_url: str) -> tuple[str, str]:
    """Two documents, one with a URL: returns the search result ids (what answers cite)."""
    async with httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=30) as client:
        for body in (
            {"title": "Leases", "content": "A lease expires after 30 s.", "url": LEASE_URL},
            {"title": "Heartbeats", "content": "The heartbeat renews a lease.", "source": "hb.md"},
        ):
            assert (
                await client.post("/v1/knowledge-bases/default/documents", json=body)
            ).is_success
        ids = []
        for word in ("expires", "heartbeat"):
            found = await client.get("/v1/knowledge-bases/default/search", params={"q": word})
            ids.append(found.json()["results"][0]["id"])
        return ids[0], ids[1]


async def run_of_newest_thread(base_url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=30) as client:
        tid = (await client.get("/v1/threads", params={"limit": 1})).json()["items"][0]["id"]
        return (await client.get(f"/v1/threads/{tid}/runs")).json()["items"][0]  # type: ignore[no-any-return]


def usage_text(run: dict[str, Any]) -> str:
    calls = run["model_calls"]
    return (
        f"{run['input_tokens']:,} in · {run['output_tokens']:,} out · "
        f"{calls} model call{'' if calls == 1 else 's'}"
    )


@WIDTHS
async def test_console_streams_markdown_answer_with_linked_citations_and_turns_survive_reload(
    live_server: LiveServerFactory, browser: Browser, width: int
) -> None:
    with OpenAICompatibleServer() as llm:
        async with live_server(llm_base_url=llm.base_url, llm_api_key="k") as base_url:
            lease_id, heartbeat_id = await seed_cited_docs(base_url)
            answer = (
                f"{STREAMED_HEAD}`30 s` unless renewed [kb:{lease_id}].\n\n"
                f"- the heartbeat renews it [kb:{heartbeat_id}]\n- an expired run is recovered\n\n"
                '<img src="x" onerror="window.__xss = 1"> Unknown: [kb:999999]. Done.'
            )
            llm.enqueue_tool_call("query_kb", {"query": "lease heartbeat"})
            llm.enqueue_text(answer)
            gate = llm.pause_stream(after=3)

            page, page_errors = await open_console(browser, base_url, width=width)
            await create_thread(page, "Streaming")
            await page.fill("#message-input", "When does a lease expire?")
            await page.click("#send-button")

            # Half the answer is on the page while the model is still writing it.
            streaming = page.locator("#transcript .msg-streaming")
            await expect(streaming).to_contain_text("Leases expire after")
            await expect(streaming.locator("strong")).to_have_text("Leases")
            await expect(page.locator("#run-status")).to_have_text("running")
            await expect(page.locator("#cancel-run")).to_be_visible()
            assert "Done." not in await page.locator("#transcript").inner_text()
            await page.screenshot(path=str(ARTIFACTS / f"console-streaming-{width}.png"))
            gate.set()

            final = page.locator("#transcript .msg-assistant .msg-text", has_text="Done.")
            await expect(page.locator("#run-status")).to_have_text("completed")
            await expect(final).to_have_count(1)
            await expect(streaming).to_have_count(0)
            await expect(page.locator("#cancel-run")).to_be_hidden()
            run = await run_of_newest_thread(base_url)
            assert run["status"] == "completed" and run["model_calls"] == 2

            async def check_answer() -> None:
                await expect(final.locator("strong")).to_have_text("Leases")
                await expect(final.locator("code")).to_have_text("30 s")
                await expect(final.locator("li")).to_have_count(2)
                # Sanitized: the img (and its handler) is gone and never ran.
                assert await final.locator("img, [onerror]").count() == 0
                assert await page.evaluate("() => window.__xss") is None
                # The cited document with a URL links to it; the other opens its passage.
                url_cite = final.locator(f"a.cite[data-kb-id='{lease_id}']")
                await expect(url_cite).to_have_attribute("href", LEASE_URL)
                await expect(url_cite).to_have_attribute("target", "_blank")
                await expect(url_cite).to_have_text(f"[kb:{lease_id}]")
                await expect(final.locator(".cite-unknown")).to_have_text("[kb:999999]")
                await final.locator(f"a.cite[data-kb-id='{heartbeat_id}']").click()
                dialog = page.locator("#cite-dialog")
                await expect(dialog).to_be_visible()
                await expect(page.locator("#cite-title")).to_have_text("Heartbeats")
                await expect(page.locator("#cite-meta")).to_contain_text("source hb.md")
                await expect(page.locator("#cite-content")).to_have_text(
                    "The heartbeat renews a lease."
                )
                await dialog.locator("button").click()
                await expect(dialog).to_be_hidden()
                # The turn shows its run's status and the token usage the server recorded.
                turn = page.locator("#transcript .msg-user .turn-meta")
                await expect(turn.locator(".turn-status")).to_have_text("completed")
                await expect(turn.locator(".turn-usage")).to_have_text(usage_text(run))

            await check_answer()
            if width < DESKTOP:
                await assert_fits_width(page, width)
            await page.screenshot(
                path=str(ARTIFACTS / f"console-answer-{width}.png"), full_page=True
            )

            # A reload rebuilds the same transcript, citations and turn status from the API.
            await page.reload()
            await expect(page.locator("#connection")).to_have_text("connected")
            await expect(page.locator("#thread-title")).to_have_text("Streaming")
            await check_answer()
            await expect(page.locator("#transcript .msg-streaming")).to_have_count(0)
            assert page_errors == []
            await page.context.close()


@WIDTHS
async def test_console_busy_notice_clears_cancel_run_and_delete_thread(
    live_server: LiveServerFactory, browser: Browser, width: int
) -> None:
    # query_kb needs an approval: each turn stops `interrupted`, which keeps the thread busy.
    async with live_server(approval_tools="query_kb") as base_url:
        await seed_cited_docs(base_url)
        page, page_errors = await open_console(browser, base_url, width=width)
        await create_thread(page, "Approvals")
        turns = page.locator("#transcript .msg-user .turn-meta .turn-status")

        await page.fill("#message-input", QUESTION)
        await page.click("#send-button")
        await expect(page.locator("#interrupt")).to_be_visible()
        await expect(turns.nth(0)).to_have_text("interrupted")

        # 409 while the run waits; the notice goes away by itself once the thread is idle.
        notice = page.locator("#compress-result")
        await page.click("#compress-button")
        await expect(notice).to_have_attribute("data-state", "busy")
        await expect(notice).to_contain_text("thread_busy")
        await page.screenshot(path=str(ARTIFACTS / f"console-busy-notice-{width}.png"))
        await page.click("#approve-button")
        await expect(page.locator("#run-status")).to_have_text("completed")
        await expect(turns.nth(0)).to_have_text("completed")
        await expect(notice).to_be_hidden()

        # Cancel: the second turn's run stops and says so, in the header and on the turn.
        await page.fill("#message-input", "And the heartbeat?")
        await page.click("#send-button")
        await expect(turns.nth(1)).to_have_text("interrupted")
        await page.click("#cancel-run")
        await expect(page.locator("#run-status")).to_have_text("cancelled")
        await expect(turns.nth(1)).to_have_text("cancelled")
        await expect(page.locator("#cancel-run")).to_be_hidden()
        await expect(page.locator("#send-button")).to_be_enabled()
        assert (await run_of_newest_thread(base_url))["status"] == "cancelled"
        if width < DESKTOP:
            await assert_fits_width(page, width)
        await page.screenshot(
            path=str(ARTIFACTS / f"console-cancelled-{width}.png"), full_page=True
        )

        # Delete (after a confirmation): gone from the list, from the API and after a reload.
        page.once("dialog", lambda d: asyncio.ensure_future(d.accept()))
        await page.click("#delete-thread")
        await expect(page.locator("#thread-title")).to_have_text("No thread selected")
        await expect(page.locator("#thread-list")).not_to_contain_text("Approvals")
        async with httpx.AsyncClient(base_url=base_url, headers=AUTH) as client:
            assert (await client.get("/v1/threads")).json()["items"] == []
        await page.reload()
        await expect(page.locator("#connection")).to_have_text("connected")
        await expect(page.locator("#threads-empty")).to_be_visible()
        await expect(page.locator("#thread-title")).to_have_text("No thread selected")
        assert page_errors == []
        await page.context.close()


async def test_api_docs_render_offline(live_server: LiveServerFactory, browser: Browser) -> None:
    """Swagger UI and Redoc render with every request to another origin refused."""
    foreign: list[str] = []
    async with live_server(start_worker=False) as base_url:

        async def offline(route: Route) -> None:
            if route.request.url.startswith(base_url + "/"):
                await route.continue_()
            else:
                foreign.append(route.request.url)
                await route.abort()

        for width in (DESKTOP, MOBILE):
            context = await browser.new_context(viewport={"width": width, "height": 900})
            await context.route("**/*", offline)
            page = await context.new_page()
            page.set_default_timeout(UI_TIMEOUT_MS)
            await page.goto(base_url + "/schema/swagger")
            await expect(page.locator(".swagger-ui .info .title")).to_contain_text("Threadkeeper")
            await expect(page.locator(".opblock-summary-path").first).to_be_visible()
            assert await page.locator(".opblock").count() >= 16
            await page.screenshot(path=str(ARTIFACTS / f"swagger-{width}.png"))
            await page.goto(base_url + "/schema/redoc")
            await expect(page.locator("h1").first).to_contain_text("Threadkeeper")
            await expect(page.get_by_text("StreamRunEvents").first).to_be_attached()
            await page.screenshot(path=str(ARTIFACTS / f"redoc-{width}.png"))
            assert foreign == []
            await context.close()


@WIDTHS
async def test_console_withdraws_a_queued_message(
    live_server: LiveServerFactory, browser: Browser, width: int
) -> None:
    # No worker: the message stays queued until the operator withdraws it.
    async with live_server(start_worker=False) as base_url:
        page, page_errors = await open_console(browser, base_url, width=width)
        await create_thread(page, "Second thoughts")
        await page.fill("#message-input", "Never mind this one")
        await page.click("#send-button")
        turn = page.locator("#transcript .msg-user .turn-meta")
        await expect(turn.locator(".turn-status")).to_have_text("queued")
        notice = page.locator("#compress-result")
        await page.click("#compress-button")
        # Once the answer is in (the notice leaves "pending"), say what it was if it is not the 409:
        # a CI run once saw another state here and the bare attribute check did not say which.
        await expect(notice).to_have_attribute("data-state", re.compile("^(busy|ok|info|error)$"))
        answered = await notice.get_attribute("data-state")
        assert answered == "busy", f"{answered}: {await notice.text_content()}"
        await page.screenshot(path=str(ARTIFACTS / f"console-queued-{width}.png"), full_page=True)

        await turn.locator("button.withdraw").click()
        await expect(turn.locator(".turn-status")).to_have_text("withdrawn")
        await expect(turn.locator("button.withdraw")).to_have_count(0)
        await expect(page.locator("#send-button")).to_be_enabled()
        await expect(notice).to_be_hidden()  # the thread is idle: the 409 notice went away
        async with httpx.AsyncClient(base_url=base_url, headers=AUTH) as client:
            thread = (await client.get("/v1/threads")).json()["items"][0]
            assert thread["status"] == "idle"
            messages = (await client.get(f"/v1/threads/{thread['id']}/messages")).json()["items"]
            assert [m["withdrawn"] for m in messages] == [True]
        if width < DESKTOP:
            await assert_fits_width(page, width)
        await page.screenshot(
            path=str(ARTIFACTS / f"console-withdrawn-{width}.png"), full_page=True
        )

        await page.reload()
        await expect(page.locator("#thread-title")).to_have_text("Second thoughts")
        await expect(turn.locator(".turn-status")).to_have_text("withdrawn")
        await expect(page.locator("#send-button")).to_be_enabled()
        assert page_errors == []
        await page.context.close()


# --- issue 19: agents ---------------------------------------------------------------------------
async def test_console_agent_picker_thread_agent_and_budget(
    live_server: LiveServerFactory, browser: Browser, tmp_path: Path
) -> None:
    agents = tmp_path / "agents.toml"
    agents.write_text(
        '[[agents]]\nid = "default"\nname = "Generalist"\nmodel = "offline"\n\n'
        '[[agents]]\nid = "tight"\nname = "Tight budget"\nmodel = "offline"\n'
        "[agents.compression]\nsummary_threshold = 4321\nsummary_keep_recent_tokens = 1000\n"
    )
    async with live_server(agents_file=str(agents)) as base_url:
        page, page_errors = await open_console(browser, base_url)
        picker = page.locator("#new-thread-agent")
        await expect(picker).to_be_visible()
        await expect(picker.locator("option")).to_have_text(["Generalist", "Tight budget"])
        await expect(picker).to_have_value("default")

        await picker.select_option("tight")
        await create_thread(page, "Tight thread")
        current = page.locator("#thread-list [aria-current=true]")
        await expect(current).to_contain_text("Tight budget")
        await expect(page.locator("#agent-name")).to_have_text("Tight budget")
        await expect(page.locator("#agent-budget")).to_contain_text("threshold 4,321")
        await expect(page.locator("#summary-threshold")).to_have_text("4,321")

        await picker.select_option("default")
        await create_thread(page, "General thread")
        await expect(page.locator("#thread-list [aria-current=true]")).to_contain_text("Generalist")
        await expect(page.locator("#agent-name")).to_have_text("Generalist")
        await expect(page.locator("#agent-budget")).to_contain_text("threshold 12,000")
        await page.screenshot(path=str(ARTIFACTS / "console-agents.png"), full_page=True)
        assert page_errors == []
        await page.context.close()
