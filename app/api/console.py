"""The operator console: static files under ``/console/`` (no auth; the page sends the API key).

The page is plain HTML + ES modules in ``app/static/console`` (no build step). Its API client,
``api-client.js``, is generated from the OpenAPI document by ``scripts/generate_console_client.py``.
"""

from __future__ import annotations

from pathlib import Path

from litestar import get
from litestar.datastructures import CacheControlHeader
from litestar.response import Redirect
from litestar.static_files import create_static_files_router
from litestar.types import ControllerRouterHandler

CONSOLE_DIR = Path(__file__).resolve().parent.parent / "static" / "console"


@get("/", include_in_schema=False, sync_to_thread=False)
def console_redirect() -> Redirect:
    return Redirect(path="/console/")


def console_handlers() -> list[ControllerRouterHandler]:
    """Route handlers the console adds to the app (outside the authenticated ``/v1`` router).

    A fresh static router per app: the test suite builds many apps in one process.
    """
    static = create_static_files_router(
        path="/console",
        directories=[CONSOLE_DIR],
        html_mode=True,
        name="console",
        # Small files that change with each deploy: revalidate instead of running stale JS.
        cache_control=CacheControlHeader(no_cache=True),
        include_in_schema=False,
    )
    return [console_redirect, static]
