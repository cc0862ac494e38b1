"""The app without a database (a container that only closes): what unit tests need to read the
served OpenAPI document or render the console."""

from __future__ import annotations

from typing import Any

from litestar import Litestar
from litestar.testing import TestClient

from app.config import load_settings
from app.main import create_app


class _StubContainer:
    async def close(self) -> None:
        return None


async def _stub_container(_: Any) -> Any:
    return _StubContainer()


def app_without_database() -> Litestar:
    return create_app(load_settings({}, log_json=False), container_factory=_stub_container)


def served_openapi_document() -> dict[str, Any]:
    """``/schema/openapi.json`` as the app serves it."""
    with TestClient(app_without_database()) as client:
        return client.get("/schema/openapi.json").json()  # type: ignore[no-any-return]
