"""The agent's tools: knowledge-base search, optional web search, and reading offloaded results."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any, Protocol

import httpx
import structlog
from langchain.agents.middleware import ToolCallRequest
from langchain.tools import ToolRuntime
from langchain_core.tools import BaseTool, tool
from sqlalchemy.exc import SQLAlchemyError

from app.agents.context import AgentContext
from app.compression.recall import search_workdir as search_originals
from app.compression.tool_names import QUERY_KB, READ_WORKDIR_FILE, SEARCH_WORKDIR, WEB_SEARCH
from app.compression.workdir import Workdir, WorkdirError
from app.config import WebSearchSettings
from app.db.errors import is_connection_error

MAX_READ_CHARS = 20_000
MAX_SEARCH_HITS = 20

log = structlog.get_logger(__name__)

#: Parameterized, so the tools' argument schema types ``runtime.context`` as our dataclass:
#: a bare ``ToolRuntime`` types it ``None`` and pydantic warns each time it serializes one.
AgentToolRuntime = ToolRuntime[AgentContext, Any]


class KbSearch(Protocol):
    """The knowledge-base search ``query_kb`` runs: the JSON payload of SearchKnowledgeBase
    (built in the container from ``KnowledgeBaseService.search``, so the tool and the HTTP
    route are one search with one result shape)."""

    def __call__(
        self, *, kb: str, owner_id: str, query: str, limit: int
    ) -> Awaitable[dict[str, Any]]: ...


def _context(runtime: AgentToolRuntime) -> AgentContext:
    ctx = runtime.context
    if not isinstance(ctx, AgentContext):
        raise RuntimeError("the agent was run without an AgentContext")
    return ctx


def build_tools(
    web_search: WebSearchSettings, search_kb: KbSearch, workdir: Workdir, *, kb: str = "default"
) -> list[BaseTool]:
    """The built-in tools; ``query_kb`` searches the knowledge base ``kb`` (the agent's)."""

    @tool(QUERY_KB)
    async def query_kb(query: str, runtime: AgentToolRuntime, limit: int = 8) -> str:
        """Search the knowledge base. Returns JSON with count and results (id, doc_id, source,
        title, url, score, content). Cite result ids in answers."""
        ctx = _context(runtime)
        limit = max(1, min(int(limit), 50))
        payload = await search_kb(kb=kb, owner_id=ctx.owner_id, query=query, limit=limit)
        return json.dumps(payload, ensure_ascii=False)

    @tool(READ_WORKDIR_FILE)
    async def read_workdir_file(
        path: str, runtime: AgentToolRuntime, offset: int = 0, limit: int = 8000
    ) -> str:
        """Read a file of this thread's workdir (e.g. an offloaded tool result), paged by
        characters: pass offset and limit to read further."""
        ctx = _context(runtime)
        limit = max(1, min(int(limit), MAX_READ_CHARS))
        try:
            chunk, total, sha = await workdir.read_text(
                ctx.thread_id, path, offset=max(0, offset), limit=limit
            )
        except (WorkdirError, ValueError, OSError) as exc:
            return json.dumps({"error": str(exc), "path": path})
        end = min(offset + len(chunk), total)
        return json.dumps(
            {
                "path": path,
                "sha256": sha,
                "total_chars": total,
                "offset": offset,
                "returned_chars": len(chunk),
                "next_offset": end if end < total else None,
                "content": chunk,
            },
            ensure_ascii=False,
        )

    @tool(SEARCH_WORKDIR)
    async def search_workdir(query: str, runtime: AgentToolRuntime, limit: int = 5) -> str:
        """Full-text search over every tool result this thread offloaded to its workdir (also
        ones summarized away long ago). Returns JSON hits with path, offset, end and a snippet;
        read more with read_workdir_file(path, offset, limit)."""
        ctx = _context(runtime)
        limit = max(1, min(int(limit), MAX_SEARCH_HITS))
        try:
            hits = await search_originals(workdir, ctx.thread_id, query, limit=limit)
        except (WorkdirError, ValueError, OSError) as exc:
            return json.dumps({"error": str(exc), "query": query})
        return json.dumps(
            {"query": query, "count": len(hits), "hits": [hit.as_dict() for hit in hits]},
            ensure_ascii=False,
        )

    tools: list[BaseTool] = [query_kb, read_workdir_file, search_workdir]
    if web_search.web_search_url:
        tools.append(_web_search_tool(web_search))
    return tools


def _web_search_tool(search: WebSearchSettings) -> BaseTool:
    # An empty key used to be sent as "Bearer " (an illegal header: every call failed).
    auth = (
        {"Authorization": f"Bearer {search.web_search_api_key}"}
        if search.web_search_api_key
        else {}
    )
    if search.web_search_kind == "tavily" and not auth:
        log.warning(
            "web_search_without_api_key",
            hint="THREADKEEPER_WEB_SEARCH_API_KEY is empty: requests carry no Authorization",
        )

    @tool(WEB_SEARCH)
    async def web_search(query: str, max_results: int = 5) -> str:
        """Search the web. Returns JSON with query and results (title, url, content, score)."""
        max_results = max(1, min(int(max_results), 20))
        async with httpx.AsyncClient(timeout=20.0) as client:
            if search.web_search_kind == "tavily":
                resp = await client.post(
                    search.web_search_url,
                    json={"query": query, "max_results": max_results},
                    headers=auth,
                )
            else:
                resp = await client.get(
                    search.web_search_url, params={"q": query, "format": "json"}
                )
            resp.raise_for_status()
            body = resp.json()
        results = [
            {
                "title": r.get("title", ""),
                "url": r.get("url", ""),
                "content": r.get("content", ""),
                "score": r.get("score", 0.0),
            }
            for r in (body.get("results") or [])[:max_results]
        ]
        return json.dumps({"query": query, "results": results}, ensure_ascii=False)

    return web_search


def _failure(exc: Exception) -> str:
    """What went wrong, in words safe to show the model (and the user): no URLs, hosts, keys
    or driver messages, which the exception text may carry."""
    if isinstance(exc, httpx.HTTPStatusError):
        return f"the backend answered HTTP {exc.response.status_code}"
    if isinstance(exc, httpx.TimeoutException):
        return "the backend did not answer in time"
    if isinstance(exc, httpx.TransportError):
        return "the backend could not be reached"
    if isinstance(exc, SQLAlchemyError):
        return "a database error"
    if isinstance(exc, ValueError):  # e.g. a backend answering something that is not JSON
        return f"an unexpected response or input ({type(exc).__name__})"
    return type(exc).__name__


def tool_error_content(exc: Exception, request: ToolCallRequest) -> str | None:
    """A tool that raised becomes an error ToolMessage for the model instead of failing the run
    (``ToolErrorMiddleware``'s handler). The full error goes to the server log only.

    Except a lost database connection: it propagates (``None``) so the worker retries the run's
    step once the database is back, instead of telling the model the tool failed.
    """
    if is_connection_error(exc):
        return None
    name = request.tool.name if request.tool else request.tool_call["name"]
    log.warning("tool_failed", tool=name, error=repr(exc)[:2000])
    return (
        f"Error: the {name} tool failed ({_failure(exc)}); no result. "
        "Continue without it, or try again later."
    )
