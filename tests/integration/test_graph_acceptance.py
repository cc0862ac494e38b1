"""Issue 33's acceptance: the ``create_agent`` graph of ``tests/support/graphs/acceptance`` (a
scripted chat model streaming word tokens, a safe tool, ``delete_record`` behind
``HumanInTheLoopMiddleware``; nothing of Threadkeeper in it), served from its plain
``langgraph.json`` by Threadkeeper and by LangGraph's own server (``langgraph dev`` from
``.venv-lgref``, installed as ``benchmarks/turns_reference.py`` installs it), passes the same
``langgraph-sdk`` suite (``tests/support/graph_acceptance.py``) on both."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client

from benchmarks.turns_reference import reference_venv
from tests.support.app_harness import API_KEY, AUTH, AppFactory
from tests.support.graph_acceptance import acceptance_suite
from tests.support.langgraph_dev import langgraph_dev
from tests.support.live_server import serve_in_loop
from tests.support.openai_server import OpenAICompatibleServer
from tests.support.processes import ROOT, free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

ACCEPTANCE = ROOT / "tests" / "support" / "graphs" / "acceptance"
RECORDS_EXAMPLE = ROOT / "examples" / "graphs" / "records_agent"


async def test_threadkeeper_passes_the_suite(app_factory: AppFactory) -> None:
    path = ACCEPTANCE / "langgraph.json"
    async with app_factory(agents_file=str(path)) as h, serve_in_loop(h.app) as url:
        await acceptance_suite(url, API_KEY)
        # A create_agent graph without Threadkeeper's compression declares no capability.
        agent = (await h.client.get("/v1/agents/records", headers=AUTH)).json()
        assert agent["capabilities"] == []


@pytest.mark.slow
async def test_langgraph_dev_passes_the_same_suite(tmp_path: Path) -> None:
    langgraph = reference_venv()
    assert langgraph is not None, "the langgraph-reference extra could not be installed"
    served = tmp_path / "acceptance"
    shutil.copytree(ACCEPTANCE, served)
    port, log_path = free_port(), tmp_path / "langgraph-dev.log"
    url = f"http://127.0.0.1:{port}"
    with langgraph_dev(langgraph, served, port, log_path) as proc:

        async def ready() -> bool:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            try:
                async with httpx.AsyncClient() as client:
                    return (await client.get(f"{url}/ok")).status_code == 200
            except httpx.HTTPError:
                return False

        await wait_until(ready, "langgraph dev answers /ok", timeout=180)
        await acceptance_suite(url, None)


@pytest.mark.slow
async def test_an_example_that_opts_in_runs_unchanged_under_langgraph_dev(tmp_path: Path) -> None:
    """Outside Threadkeeper the public ``threadkeeper`` import passes the model call through:
    the records example (CompressionMiddleware, its own middleware, approval) answers there."""
    langgraph = reference_venv()
    assert langgraph is not None, "the langgraph-reference extra could not be installed"
    served = tmp_path / "records_agent"
    shutil.copytree(RECORDS_EXAMPLE, served)
    port, log_path = free_port(), tmp_path / "langgraph-dev.log"
    url = f"http://127.0.0.1:{port}"
    with OpenAICompatibleServer() as srv:
        srv.enqueue_text("Hello from the provider.")
        extra = {"OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "k"}
        with langgraph_dev(langgraph, served, port, log_path, **extra) as proc:

            async def ready() -> bool:
                assert proc.poll() is None, log_path.read_text()[-3000:]
                try:
                    async with httpx.AsyncClient() as client:
                        return (await client.get(f"{url}/ok")).status_code == 200
                except httpx.HTTPError:
                    return False

            await wait_until(ready, "langgraph dev answers /ok", timeout=180)
            client = get_client(url=url, api_key=None)
            tid = (await client.threads.create())["thread_id"]
            final = await client.runs.wait(
                tid, "records", input={"messages": [{"role": "user", "content": "hi"}]}
            )
            assert final["messages"][-1]["content"] == "Hello from the provider.", final
            assert final["model_calls"] == 1  # the example's own middleware ran
