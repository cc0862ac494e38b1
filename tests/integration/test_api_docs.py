"""The API docs (Swagger UI, Redoc) work offline: their pages load only assets this app serves."""

from __future__ import annotations

import re

import pytest

from app.api.console import VENDOR_DIR, VENDOR_PATH
from tests.support.app_harness import AppFactory

pytestmark = pytest.mark.integration

ASSET = re.compile(r"""<(?:script|link)\b[^>]*\b(?:src|href)=["']([^"']+)["']""", re.IGNORECASE)
CONTENT_TYPES = {".js": "javascript", ".css": "text/css"}


@pytest.mark.parametrize("page", ["/schema", "/schema/swagger", "/schema/redoc"])
async def test_docs_pages_reference_only_local_assets_and_they_are_served(
    app_factory: AppFactory, page: str
) -> None:
    async with app_factory(start_worker=False) as h:
        resp = await h.client.get(page)
        assert resp.status_code == 200, resp.text[:300]
        assert resp.headers["content-type"].startswith("text/html")
        html = resp.text
        assets = ASSET.findall(html)
        assert any(a.endswith(".js") for a in assets), assets
        # Nothing from another origin: no CDN, no Google Fonts, no remote favicon.
        assert not re.search(r"https?://|//cdn|fonts\.googleapis", html.split("<body")[0]), html
        for url in assets:
            if url.startswith("data:"):
                continue
            assert url.startswith(f"{VENDOR_PATH}/"), url
            served = await h.client.get(url)
            assert served.status_code == 200, url
            suffix = "." + url.rsplit(".", 1)[-1]
            assert CONTENT_TYPES[suffix] in served.headers["content-type"], (url, served.headers)
            assert served.content == (VENDOR_DIR / url.removeprefix(f"{VENDOR_PATH}/")).read_bytes()


async def test_console_markdown_libraries_are_served_locally(app_factory: AppFactory) -> None:
    async with app_factory(start_worker=False) as h:
        app_js = (await h.client.get("/console/app.js")).text
        imports = re.findall(r"""^import .* from "([^"]+)";$""", app_js, re.MULTILINE)
        assert f"{VENDOR_PATH}/marked/marked.esm.js" in imports
        assert f"{VENDOR_PATH}/dompurify/purify.es.js" in imports
        for url in imports:
            if url.startswith(VENDOR_PATH):
                served = await h.client.get(url)
                assert served.status_code == 200 and "javascript" in served.headers["content-type"]
        assert (await h.client.get(f"{VENDOR_PATH}/marked/LICENSE")).status_code == 200
        assert (await h.client.get(f"{VENDOR_PATH}/../api/console.py")).status_code == 404
