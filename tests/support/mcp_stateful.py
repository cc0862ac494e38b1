"""A stdio MCP server with state, for the tests of MCP servers as services (issue 30): it
counts the calls it answered and names its process, so a test sees whether calls share one
process (and its state) or each start their own.

    python tests/support/mcp_stateful.py
"""

from __future__ import annotations

import os

from mcp.server.fastmcp import FastMCP

server = FastMCP("stateful", log_level="WARNING")
visits = 0


@server.tool()
def visit(query: str) -> str:
    """Record a visit; answers this process's id and how many visits it has answered."""
    global visits
    visits += 1
    return f"pid={os.getpid()} visits={visits} query={query}"


if __name__ == "__main__":
    server.run("stdio")
