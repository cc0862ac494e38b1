"""The agent's tools against real backends: PostgreSQL FTS, HTTP search APIs, the Workdir."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from langchain.tools import ToolRuntime
from langchain_core.messages import ToolMessage

from app.agents.context import AgentContext
from app.agents.tools import build_tools
from app.compression.recall import index_fields
from app.compression.workdir import Workdir
from app.db.session import create_engine, create_session_factory
from app.services.knowledge_base import KnowledgeBaseService
from tests.conftest import AUTH, AppFactory, make_settings
from tests.support.api import messages, new_thread
from tests.support.openai_server import OpenAICompatibleServer
from tests.support.search_backend import LoopbackServer, SearchBackend

pytestmark = pytest.mark.integration


@pytest.fixture
def backend() -> Iterator[SearchBackend]:
    with SearchBackend() as b:
        yield b


def runtime_for(thread_id: str) -> ToolRuntime[Any, Any]:
    return ToolRuntime(
        state={"messages": []},
        context=AgentContext(owner_id="alice", thread_id=thread_id),
        config={},
        stream_writer=lambda _: None,
        tool_call_id="call_x",
        store=None,
    )


async def test_web_search_searxng_and_tavily(
    backend: SearchBackend, clean_db: str, tmp_path: Path
) -> None:
    engine = create_engine(clean_db)
    try:
        sessions = create_session_factory(engine)
        for kind in ("searxng", "tavily"):
            settings = make_settings(
                clean_db,
                tmp_path,
                web_search_url=backend.url,
                web_search_kind=kind,
                web_search_api_key="tv-key",
            )
            tools = {
                t.name: t
                for t in build_tools(
                    settings.web_search, KnowledgeBaseService(sessions).search, Workdir(tmp_path)
                )
            }
            out = json.loads(
                await tools["web_search"].ainvoke({"query": "leases", "max_results": 3})
            )
            assert out["query"] == "leases"
            assert 1 <= len(out["results"]) <= 3
            assert set(out["results"][0]) == {"title", "url", "content", "score"}
        assert backend.calls[0]["method"] == "GET" and backend.calls[0]["q"]["format"] == ["json"]
        assert backend.calls[1]["method"] == "POST" and backend.calls[1]["auth"] == "Bearer tv-key"
        # Not configured -> the tool does not exist at all.
        plain = make_settings(clean_db, tmp_path)
        assert "web_search" not in {
            t.name
            for t in build_tools(
                plain.web_search, KnowledgeBaseService(sessions).search, Workdir(tmp_path)
            )
        }
    finally:
        await engine.dispose()


async def test_read_workdir_file_pages_and_refuses_escapes(clean_db: str, tmp_path: Path) -> None:
    engine = create_engine(clean_db)
    try:
        wd = Workdir(tmp_path / "wd")
        (tmp_path / "wd").mkdir()
        text = "".join(f"line {i}\n" for i in range(3000))
        record = await wd.write_tool_result("thread-1", "call_1", text)
        tools = {
            t.name: t
            for t in build_tools(
                make_settings(clean_db, tmp_path).web_search,
                KnowledgeBaseService(create_session_factory(engine)).search,
                wd,
            )
        }
        reader = tools["read_workdir_file"]
        rt = runtime_for("thread-1")
        pieces = []
        offset: int | None = 0
        while offset is not None:
            page = json.loads(
                await reader.ainvoke(
                    {"path": record.path, "offset": offset, "limit": 5000, "runtime": rt}
                )
            )
            assert page["sha256"] == record.sha256 and page["total_chars"] == len(text)
            pieces.append(page["content"])
            offset = page["next_offset"]
        assert "".join(pieces) == text
        for bad in ("../thread-2/tool-results/call_1.txt", "/etc/passwd", "tool-results/../../x"):
            out = json.loads(
                await reader.ainvoke({"path": bad, "offset": 0, "limit": 10, "runtime": rt})
            )
            assert "error" in out and "content" not in out
        # Another thread cannot read this thread's file.
        other = json.loads(
            await reader.ainvoke(
                {"path": record.path, "offset": 0, "limit": 10, "runtime": runtime_for("thread-2")}
            )
        )
        assert "error" in other
    finally:
        await engine.dispose()


class BrokenSearchBackend(LoopbackServer):
    """A search API that fails: HTTP 500 echoing internals, then a dropped
    connection with no response at all."""

    SECRET = "internal-search.corp:9200 key=sk-leaked-1234"

    def __init__(self) -> None:
        self.auth_headers: list[str | None] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["content-length"]))
                owner.auth_headers.append(self.headers.get("authorization"))
                if len(owner.auth_headers) == 1:
                    data = json.dumps({"error": owner.SECRET}).encode()
                    self.send_response(500)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                else:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)

        super().__init__(Handler)


async def test_failing_web_search_is_an_error_tool_message_not_a_failed_run(
    app_factory: AppFactory,
) -> None:
    """Tavily with no key sent ``Bearer `` (illegal header) and any tool exception failed the
    whole run; now the model gets an error ToolMessage and the turn completes."""
    with BrokenSearchBackend() as search, OpenAICompatibleServer() as llm:
        async with app_factory(
            llm_base_url=llm.base_url,
            llm_api_key="k",
            web_search_url=search.url,
            web_search_kind="tavily",
            web_search_api_key="",
        ) as h:
            llm.enqueue_tool_call("web_search", {"max_results": "many"})  # bad arguments
            llm.enqueue_tool_call("web_search", {"query": "lease expiry"})
            llm.enqueue_tool_call("web_search", {"query": "lease expiry again"})
            llm.enqueue_text("The search backend is down; answering from memory.")
            tid = await new_thread(h)
            await h.client.post(
                f"/v1/threads/{tid}/messages", json={"content": "search it"}, headers=AUTH
            )
            run = await h.wait_for_run(tid, statuses={"completed", "failed"})
            assert run["status"] == "completed", run["error"]
            assert search.auth_headers == [None, None]  # no "Bearer " with an empty key

            tools = [m for m in await messages(h, tid) if m["role"] == "tool"]
            assert [m["tool_name"] for m in tools] == ["web_search"] * 3
            assert "query" in tools[0]["content"] and "required" in tools[0]["content"].lower()
            assert "web_search tool failed (the backend answered HTTP 500)" in tools[1]["content"]
            unreachable = "web_search tool failed (the backend could not be reached)"
            assert unreachable in tools[2]["content"]
            # The model saw the errors, sanitized: no backend internals, no URL.
            sent = [m for m in llm.requests[3]["messages"] if m["role"] == "tool"]
            assert [m["content"] for m in sent] == [m["content"] for m in tools]
            for m in tools:
                assert BrokenSearchBackend.SECRET not in m["content"]
                assert "127.0.0.1" not in m["content"]
            snap = await h.container.agent.graph.aget_state(h.container.agent.config_for(tid))
            statuses = [m.status for m in snap.values["messages"] if isinstance(m, ToolMessage)]
            assert statuses == ["error", "error", "error"]


async def test_search_workdir_hits_lead_read_workdir_file_to_the_passage(
    clean_db: str, tmp_path: Path
) -> None:
    engine = create_engine(clean_db)
    try:
        wd = Workdir(tmp_path / "wd")
        (tmp_path / "wd").mkdir()
        filler = "".join(f"log line {i}: heartbeat ok\n" for i in range(2000))
        text = filler + "ERROR disk quota exceeded on replica-7\n" + filler
        await wd.write_tool_result(
            "thread-1", "call_1", text, index=index_fields("run_shell", {"cmd": "tail"}, text)
        )
        tools = {
            t.name: t
            for t in build_tools(
                make_settings(clean_db, tmp_path).web_search,
                KnowledgeBaseService(create_session_factory(engine)).search,
                wd,
            )
        }
        out = json.loads(
            await tools["search_workdir"].ainvoke(
                {"query": "quota exceeded replica", "runtime": runtime_for("thread-1")}
            )
        )
        assert out["count"] == 1
        hit = out["hits"][0]
        assert hit["path"] == "tool-results/call_1.txt" and hit["tool"] == "run_shell"
        assert "disk quota exceeded on replica-7" in hit["snippet"]
        page = json.loads(
            await tools["read_workdir_file"].ainvoke(
                {
                    "path": hit["path"],
                    "offset": hit["offset"],
                    "limit": hit["end"] - hit["offset"],
                    "runtime": runtime_for("thread-1"),
                }
            )
        )
        assert page["content"] == hit["snippet"]
        # the same search from another thread finds nothing: its workdir has no such original
        other = json.loads(
            await tools["search_workdir"].ainvoke(
                {"query": "quota exceeded replica", "runtime": runtime_for("thread-2")}
            )
        )
        assert other == {"query": "quota exceeded replica", "count": 0, "hits": []}
    finally:
        await engine.dispose()
