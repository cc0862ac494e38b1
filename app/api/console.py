"""The operator console: static files under ``/console/`` (no auth; the page sends the API key).

The page is plain HTML + ES modules in ``app/static/console`` (no build step). Its API client,
``api-client.js``, is generated from the OpenAPI document by ``scripts/generate_console_client.py``.
Third-party browser code (marked, DOMPurify, Swagger UI, Redoc) is vendored under
``app/static/vendor`` by ``scripts/vendor_assets.py`` and served from ``/vendor/``: the console and
the API docs at ``/schema/swagger`` and ``/schema/redoc`` work offline, with no CDN.
"""

from __future__ import annotations

from pathlib import Path

from litestar import get
from litestar.datastructures import CacheControlHeader
from litestar.openapi.plugins import (
    JsonRenderPlugin,
    OpenAPIRenderPlugin,
    RedocRenderPlugin,
    SwaggerRenderPlugin,
    YamlRenderPlugin,
)
from litestar.response import Redirect
from litestar.static_files import create_static_files_router
from litestar.types import ControllerRouterHandler

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
CONSOLE_DIR = STATIC_DIR / "console"
VENDOR_DIR = STATIC_DIR / "vendor"
VENDOR_PATH = "/vendor"
#: Extra ``<head>`` of the docs pages (Litestar's ``favicon`` slot). Its default favicon comes from a
#: CDN: an empty data URL instead. Redoc's "API docs by Redocly" footer loads a logo from its CDN
#: (hidden when it fails): images are limited to this origin, so nothing is requested elsewhere.
DOCS_HEAD = (
    "<link rel='icon' href='data:,'>"
    "<meta http-equiv='Content-Security-Policy' content=\"img-src 'self' data:\">"
)


@get("/", include_in_schema=False, sync_to_thread=False)
def console_redirect() -> Redirect:
    return Redirect(path="/console/")


def console_handlers() -> list[ControllerRouterHandler]:
    """Route handlers the console adds to the app (outside the authenticated ``/v1`` router).

    Fresh static routers per app: the test suite builds many apps in one process.
    """
    # Small files that change with each deploy: revalidate instead of running stale JS.
    no_cache = CacheControlHeader(no_cache=True)
    static = create_static_files_router(
        path="/console",
        directories=[CONSOLE_DIR],
        html_mode=True,
        name="console",
        cache_control=no_cache,
        include_in_schema=False,
    )
    vendor = create_static_files_router(
        path=VENDOR_PATH,
        directories=[VENDOR_DIR],
        name="vendor",
        cache_control=no_cache,
        include_in_schema=False,
    )
    return [console_redirect, static, vendor]


def openapi_render_plugins() -> list[OpenAPIRenderPlugin]:
    """The OpenAPI pages, all on local assets: Swagger UI (also at ``/schema``), Redoc, JSON, YAML.

    Litestar's other viewers (RapiDoc, Elements, Scalar) only load from CDNs, so they are not offered.
    """
    swagger = f"{VENDOR_PATH}/swagger-ui"
    return [
        SwaggerRenderPlugin(
            path=["/swagger", "/"],
            js_url=f"{swagger}/swagger-ui-bundle.js",
            css_url=f"{swagger}/swagger-ui.css",
            standalone_preset_js_url=f"{swagger}/swagger-ui-standalone-preset.js",
            favicon=DOCS_HEAD,
        ),
        RedocRenderPlugin(
            js_url=f"{VENDOR_PATH}/redoc/redoc.standalone.js",
            google_fonts=False,
            favicon=DOCS_HEAD,
        ),
        JsonRenderPlugin(),
        YamlRenderPlugin(),
    ]
