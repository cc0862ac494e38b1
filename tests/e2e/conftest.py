"""The console's browser tests: the app on a listening socket and a headless chromium."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, expect

from tests.support.console import UI_TIMEOUT_MS, LiveServerFactory, chromium, live_servers

expect.set_options(timeout=UI_TIMEOUT_MS)  # a busy CI machine: waits are generous, never timed


@pytest.fixture
def live_server(clean_db: str, tmp_path: Path) -> LiveServerFactory:
    """Start the real app on a listening socket; yields its base URL (same DB and workdir)."""
    return live_servers(clean_db, tmp_path)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as b:
        yield b
