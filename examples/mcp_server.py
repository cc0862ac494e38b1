"""A small MCP server for the example agents file: a glossary of Threadkeeper terms.

Built with the ``mcp`` package (installed with Threadkeeper, via ``langchain-mcp-adapters``).

    python examples/mcp_server.py                    # stdio (the agents file starts it)
    python examples/mcp_server.py --http --port 8765 # streamable HTTP at http://127.0.0.1:8765/mcp
"""

from __future__ import annotations

import argparse

from mcp.server.fastmcp import FastMCP

GLOSSARY = {
    "lease": "A lease is a run's claim on its thread; the worker renews it with heartbeats "
    "and another worker recovers the run when it expires.",
    "threshold": "The summary threshold is the one token budget: a model request that "
    "reaches it is compressed (offload first, then summary).",
    "workdir": "The Workdir keeps the full originals of offloaded tool results, each with "
    "its SHA-256, readable back with read_workdir_file.",
    "summary": "A summary replaces the oldest part of the model view; the full history "
    "stays in PostgreSQL.",
}


def build(host: str = "127.0.0.1", port: int = 8765) -> FastMCP:
    # Stateless streamable HTTP: each request is served on its own (the glossary keeps nothing
    # per client), so any replica can answer it. In the SDK's stateful mode (mcp 1.30) every
    # client that ends its session normally (HTTP DELETE) left an ERROR traceback in this log
    # ("Error in standalone SSE writer": ClosedResourceError).
    server = FastMCP("glossary", host=host, port=port, log_level="WARNING", stateless_http=True)

    @server.tool()
    def glossary(query: str) -> str:
        """Look up Threadkeeper terms (lease, threshold, workdir, summary) mentioned in the
        query; returns the matching definitions, one per line."""
        words = {w.strip(".,?!:;").lower() for w in query.split()}
        hits = [text for term, text in GLOSSARY.items() if term in words or f"{term}s" in words]
        return "\n".join(hits) or "No glossary term found in: " + query

    @server.tool()
    def term_count() -> int:
        """How many terms the glossary defines."""
        return len(GLOSSARY)

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    server = build(args.host, args.port)
    server.run("streamable-http" if args.http else "stdio")


if __name__ == "__main__":
    main()
