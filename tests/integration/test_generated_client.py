"""A typed client generated from the live OpenAPI document drives one full flow (issue 6).

``openapi-python-client`` (a standard generator) turns ``/schema/openapi.json`` into a package in
a temporary folder; the test imports it and uses only its typed functions and models against the
running app. Generator warnings (parts of the contract it could not type) fail the test.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from tests.conftest import API_KEY, AppFactory
from tests.integration.test_agent_runtime import DOC

pytestmark = pytest.mark.integration

PACKAGE = "threadkeeper_client"


@pytest.fixture
def generated_package(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
        del sys.modules[name]
    if str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def generate(spec: Path, out: Path) -> str:
    bindir = Path(sys.executable).parent
    proc = subprocess.run(
        [
            str(bindir / "openapi-python-client"),
            "generate",
            "--path",
            str(spec),
            "--output-path",
            str(out / PACKAGE),
            "--meta",
            "none",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"},
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    return output


def load(name: str) -> ModuleType:
    return importlib.import_module(f"{PACKAGE}.{name}")


async def test_generated_client_runs_a_full_flow(
    app_factory: AppFactory, generated_package: Path
) -> None:
    async with app_factory() as h:
        spec = generated_package / "openapi.json"
        spec.write_bytes((await h.client.get("/schema/openapi.json")).content)
        output = await asyncio.to_thread(generate, spec, generated_package)
        assert "Warning" not in output and "WARNING" not in output, output

        sys.path.insert(0, str(generated_package))
        client_mod = load("client")
        models = load("models")
        create_thread = load("api.threads.create_thread")
        post_message = load("api.threads.post_message")
        list_messages = load("api.threads.list_messages")
        get_thread = load("api.threads.get_thread")
        list_runs = load("api.runs.list_runs")
        add_document = load("api.knowledge_bases.add_document")
        get_agent_state = load("api.context.get_agent_state")
        compress_context = load("api.context.compress_context")

        client = client_mod.AuthenticatedClient(
            base_url="http://testserver",
            token=API_KEY,
            httpx_args={"transport": httpx.ASGITransport(app=h.app)},
            raise_on_unexpected_status=True,
        )
        async with client:
            doc = await add_document.asyncio_detailed(
                "default",
                client=client,
                body=models.AddDocumentIn(title="Operations guide", content=DOC),
            )
            assert doc.status_code == 201 and isinstance(doc.parsed, models.DocumentOut)

            created = await create_thread.asyncio_detailed(
                client=client, body=models.CreateThreadIn(title="sdk")
            )
            assert created.status_code == 201
            thread = created.parsed
            assert isinstance(thread, models.ThreadOut) and isinstance(thread.id, uuid.UUID)
            assert thread.title == "sdk"

            posted = await post_message.asyncio_detailed(
                thread.id,
                client=client,
                body=models.PostMessageIn(content="What happens when a lease expires?"),
            )
            assert posted.status_code == 202
            assert isinstance(posted.parsed, models.PostMessageOut)

            run = None
            for _ in range(600):
                runs = await list_runs.asyncio_detailed(thread.id, client=client)
                assert isinstance(runs.parsed, models.RunList)
                if runs.parsed.items and runs.parsed.items[0].status in ("completed", "failed"):
                    run = runs.parsed.items[0]
                    break
                await asyncio.sleep(0.05)
            assert run is not None and run.status == "completed", run
            assert run.request_id == posted.parsed.request_id

            page = await list_messages.asyncio_detailed(thread.id, client=client)
            assert isinstance(page.parsed, models.MessagePage)
            history = page.parsed.items
            assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
            assert history[0].id == posted.parsed.message_id
            assert "lease" in history[-1].content.lower()

            st = await get_agent_state.asyncio_detailed(thread.id, client=client)
            assert isinstance(st.parsed, models.AgentStateOut)
            assert st.parsed.context.input_tokens > 0
            assert st.parsed.capabilities.manual_compression.available is True
            assert len(st.parsed.messages) == len(history)

            compressed = await compress_context.asyncio_detailed(thread.id, client=client)
            if compressed.status_code == 200:
                assert isinstance(compressed.parsed, models.CompressOut)
                assert compressed.parsed.after_tokens <= compressed.parsed.before_tokens
            else:
                assert compressed.status_code == 422
                assert isinstance(compressed.parsed, models.ErrorBody)
                assert compressed.parsed.error == "nothing_to_compress"

            again = await list_messages.asyncio_detailed(thread.id, client=client)
            assert isinstance(again.parsed, models.MessagePage)
            assert [m.to_dict() for m in again.parsed.items] == [m.to_dict() for m in history]

            # Typed errors too: a missing thread is a parsed ErrorBody, not an exception.
            missing = await get_thread.asyncio_detailed(uuid.uuid4(), client=client)
            assert missing.status_code == 404
            assert isinstance(missing.parsed, models.ErrorBody)
            assert missing.parsed.error == "not_found"
