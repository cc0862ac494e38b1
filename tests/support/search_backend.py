"""Web-search APIs as real HTTP servers on loopback (SearxNG's GET and Tavily's POST)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlparse


class LoopbackServer:
    """A real HTTP server on 127.0.0.1 (ephemeral port) running ``handler`` in a thread."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/search"

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class FixedSearch(LoopbackServer):
    """A SearxNG-style backend answering every GET with ``body`` byte for byte (what a real
    backend may send and our own JSON encoding would never produce)."""

    def __init__(self, body: bytes) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(Handler)


class SearchBackend(LoopbackServer):
    """Speaks SearxNG's GET /search?format=json and Tavily's POST."""

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

        super().__init__(Handler)
