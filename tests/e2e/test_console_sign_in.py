"""Issue 35: the console accepts a signed-in user's token (from a real OpenID Connect provider
process) where it takes an API key, and says so when a token is refused."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from playwright.async_api import Browser, expect

from tests.e2e.test_console import (  # noqa: F401 - fixtures
    UI_TIMEOUT_MS,
    LiveServerFactory,
    browser,
    create_thread,
    live_server,
)
from tests.support.oidc_provider import running_idp

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]


async def test_console_signs_in_with_a_token(
    live_server: LiveServerFactory,  # noqa: F811
    browser: Browser,  # noqa: F811
    tmp_path: Path,
) -> None:
    async with running_idp(tmp_path / "idp.log") as idp, live_server(**idp.settings()) as base:
        token = await idp.token("carol")
        page = await (await browser.new_context()).new_page()
        page.set_default_timeout(UI_TIMEOUT_MS)
        await page.goto(base + "/console/")
        await expect(page.locator("label[for=api-key]")).to_have_text("API key or token")
        # A tampered token: refused, and the console says a token may have expired.
        await page.fill("#api-key", token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB"))
        await page.click("#key-form button[type=submit]")
        await expect(page.locator("#connection")).to_contain_text("expired or invalid token")
        await page.fill("#api-key", token)
        await page.click("#key-form button[type=submit]")
        await expect(page.locator("#connection")).to_have_text("connected")
        await create_thread(page, "Signed in")
        async with httpx.AsyncClient(base_url=base) as client:
            mine = await client.get("/v1/threads", headers={"Authorization": f"Bearer {token}"})
        assert [t["title"] for t in mine.json()["items"]] == ["Signed in"]
