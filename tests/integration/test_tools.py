"""The agent's tools against real backends: PostgreSQL FTS, HTTP search APIs, the Workdir."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from langchain.tools import ToolRuntime

from app.agents.context import AgentContext
from app.agents.recall import index_fields
from app.agents.tools import build_tools
from app.agents.workdir import Workdir
from app.db.session import create_engine, create_session_factory
from tests.conftest import make_settings

pytestmark = pytest.mark.integration


class SearchBackend:
    """A real loopback HTTP server speaking SearxNG's GET /search?format=json and Tavily's POST."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                q = parse_qs(urlparse(self.path).query)
                owner.calls.append({"method": "GET", "q": q})
                results = [
                    {
                        "title": f"Result {i}",
                        "url": f"https://ex.org/{i}",
                        "content": f"c{i}",
                        "score": 1 - i / 10,
                    }
                    for i in range(8)
                ]
                self._reply({"query": q["q"][0], "results": results})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                owner.calls.append(
                    {"method": "POST", "body": body, "auth": self.headers.get("authorization")}
                )
                self._reply(
                    {
                        "query": body["query"],
                        "answer": "x",
                        "results": [
                            {
                                "title": "T",
                                "url": "https://t.org",
                                "content": "tc",
                                "score": 0.9,
                                "raw_content": None,
                            }
                        ],
                    }
                )

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/search"

    def __enter__(self) -> SearchBackend:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


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
            tools = {t.name: t for t in build_tools(settings, sessions, Workdir(tmp_path))}
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
        assert "web_search" not in {t.name for t in build_tools(plain, sessions, Workdir(tmp_path))}
    finally:
        await engine.dispose()


async def test_read_workdir_file_pages_and_refuses_escapes(clean_db: str, tmp_path: Path) -> None:
    engine = create_engine(clean_db)
    try:
        wd = Workdir(tmp_path / "wd")
        (tmp_path / "wd").mkdir()
        text = "".join(f"line {i}\n" for i in range(3000))
        record = wd.write_tool_result("thread-1", "call_1", text)
        tools = {
            t.name: t
            for t in build_tools(
                make_settings(clean_db, tmp_path), create_session_factory(engine), wd
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


async def test_search_workdir_hits_lead_read_workdir_file_to_the_passage(
    clean_db: str, tmp_path: Path
) -> None:
    engine = create_engine(clean_db)
    try:
        wd = Workdir(tmp_path / "wd")
        (tmp_path / "wd").mkdir()
        filler = "".join(f"log line {i}: heartbeat ok\n" for i in range(2000))
        text = filler + "ERROR disk quota exceeded on replica-7\n" + filler
        wd.write_tool_result(
            "thread-1", "call_1", text, index=index_fields("run_shell", {"cmd": "tail"}, text)
        )
        tools = {
            t.name: t
            for t in build_tools(
                make_settings(clean_db, tmp_path), create_session_factory(engine), wd
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
