"""The agent's tool names: the one list the tools, previews, the offload pass and the offline
model import (a tool renamed in one place and not another would silently lose its preview shape
or its protection from being offloaded)."""

from __future__ import annotations

#: Knowledge-base search (``app.agents.tools``).
QUERY_KB = "query_kb"
#: Optional web search (``THREADKEEPER_WEB_SEARCH_URL``).
WEB_SEARCH = "web_search"
#: A Tavily search tool an agent may bring; its output is read like ``web_search``'s.
TAVILY_SEARCH = "tavily_search"
#: Pages through an offloaded original in the thread's Workdir.
READ_WORKDIR_FILE = "read_workdir_file"
#: Full-text search over the thread's offloaded originals.
SEARCH_WORKDIR = "search_workdir"

#: Tools whose JSON output is parsed into a structured preview (others may still match a shape).
RETRIEVAL_TOOLS: frozenset[str] = frozenset({QUERY_KB, WEB_SEARCH, TAVILY_SEARCH})
#: Never offloaded or summarized away as originals: they are how the model reads the offloaded
#: text back, so previewing their output would send it round in circles.
RECOVERY_TOOLS: frozenset[str] = frozenset({READ_WORKDIR_FILE, SEARCH_WORKDIR})

#: The built-in tools an agent may list by name in the agents file (``tools = [...]``).
BUILTIN_TOOLS: frozenset[str] = frozenset({QUERY_KB, WEB_SEARCH, READ_WORKDIR_FILE, SEARCH_WORKDIR})
