"""A typed client generated from the live OpenAPI document drives one full flow (issue 6).

``openapi-python-client`` (a standard generator) turns ``/schema/openapi.json`` into a package in
a temporary folder; the test imports it and uses only its typed functions and models against the
running app. Generator warnings (parts of the contract it could not type) fail the test.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from tests.conftest import API_KEY, AppFactory
from tests.support.corpus import DOC

pytestmark = [pytest.mark.integration, pytest.mark.slow]

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


def sse_frames(text: str) -> list[tuple[str, dict[str, Any]]]:
    """``(event, data)`` per frame; comment lines (keep-alives) are skipped as SSE says."""
    frames: list[tuple[str, dict[str, Any]]] = []
    event, data = "", ""
    for line in text.splitlines():
        if not line:
            if data:
                frames.append((event, json.loads(data)))
            event, data = "", ""
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()
    return frames


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
        get_request = load("api.runs.get_request")
        wait_run = load("api.runs.wait_run")
        stream_run_events = load("api.runs.stream_run_events")
        update_thread = load("api.threads.update_thread")
        list_threads = load("api.threads.list_threads")
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
                idempotency_key="sdk-1",
            )
            assert posted.status_code == 202
            assert isinstance(posted.parsed, models.PostMessageOut)
            replay = await post_message.asyncio_detailed(
                thread.id,
                client=client,
                body=models.PostMessageIn(content="What happens when a lease expires?"),
                idempotency_key="sdk-1",
            )
            assert replay.status_code == 202 and replay.content == posted.content

            # GetRequest names the run once a worker took it; WaitRun long-polls its end.
            request = None
            for _ in range(1200):
                got = await get_request.asyncio_detailed(posted.parsed.request_id, client=client)
                assert isinstance(got.parsed, models.RequestOut)
                if got.parsed.status != models.RequestOutStatus.QUEUED:
                    request = got.parsed
                    break
                await asyncio.sleep(0.05)
            assert request is not None and isinstance(request.run_id, uuid.UUID), request
            waited = await wait_run.asyncio_detailed(request.run_id, client=client, timeout=30)
            run = waited.parsed
            assert isinstance(run, models.RunOut)
            assert run.status == models.RunOutStatus.COMPLETED, run
            assert run.request_id == posted.parsed.request_id
            runs = await list_runs.asyncio_detailed(thread.id, client=client)
            assert isinstance(runs.parsed, models.RunList) and runs.parsed.items[0].id == run.id

            # The stream function reads the finished stream whole and returns its text...
            whole = await stream_run_events.asyncio_detailed(run.id, client=client)
            assert whole.status_code == 200 and isinstance(whole.parsed, str)
            # ...and the supported way to follow it live is the client's own httpx client, with
            # each frame's data parsed by the generated model its ``type`` names.
            event_models = {
                "status": models.StatusEvent,
                "delta": models.DeltaEvent,
                "message": models.MessageEvent,
                "compression": models.CompressionEvent,
            }
            live = client.get_async_httpx_client()
            async with live.stream("GET", f"/v1/runs/{run.id}/events") as streamed:
                body = "".join([chunk async for chunk in streamed.aiter_text()])
            assert body == whole.parsed
            events = [event_models[name].from_dict(data) for name, data in sse_frames(body)]
            assert [e.type_ for e in events] == [name for name, _ in sse_frames(body)]
            statuses = [e for e in events if isinstance(e, models.StatusEvent)]
            assert statuses[0].status == models.StatusEventStatus.RUNNING
            assert statuses[-1].status == models.StatusEventStatus.COMPLETED
            assert statuses[-1].final is True
            said = [e for e in events if isinstance(e, models.MessageEvent)]
            assert [m.role for m in said] == ["assistant", "tool", "assistant"]

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
            assert missing.parsed.error == models.ErrorCode.NOT_FOUND

            # Metadata: UpdateThread, then ListThreads filtered by it; status is an enum.
            meta = models.UpdateThreadInMetadataType0.from_dict({"team": "sdk"})
            patched = await update_thread.asyncio_detailed(
                thread.id, client=client, body=models.UpdateThreadIn(metadata=meta)
            )
            assert isinstance(patched.parsed, models.ThreadOut)
            assert patched.parsed.metadata.to_dict() == {"team": "sdk"}
            assert patched.parsed.status == models.ThreadOutStatus.IDLE
            found = await list_threads.asyncio_detailed(
                client=client, metadata=json.dumps({"team": "sdk"})
            )
            assert isinstance(found.parsed, models.ThreadPage)
            assert [t.id for t in found.parsed.items] == [thread.id]
