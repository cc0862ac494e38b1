"""``--providers``: one minimal call per distinct model (model, endpoint, key), reported per
agent. Cost: one request per distinct model, a one-line prompt ("Reply with OK.", about 15
input tokens) and its short answer (a few output tokens; a reasoning model adds its reasoning);
the offline model is never called. The answer's text is not judged: any answer means the model,
its endpoint and its key work. A failure names the HTTP status and the provider's error code
(``invalid_api_key``, ``model_not_found``...), never the provider's own text, nor the key."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

from app.checks.base import CheckContext, Report

PROVIDERS_HINT = (
    "not checked: run with --providers to call each distinct model once "
    "(a one-line prompt and a short answer each)"
)
PROMPT = "Reply with OK."


async def check_providers(ctx: CheckContext, report: Report) -> None:
    from app.agents.models import provider_models

    settings, specs = ctx.settings, ctx.specs
    assert settings is not None and specs is not None
    calls: dict[tuple[str, ...], asyncio.Task[str | None]] = {}
    uses: list[tuple[str, str, tuple[str, ...]]] = []
    for spec in specs:
        for role, (key, model) in provider_models(spec, settings).items():
            if key not in calls:
                calls[key] = asyncio.ensure_future(
                    _call(model, settings.models.llm_timeout_seconds)
                )
            uses.append((spec.id, role, key))
    if not calls:
        report.ok("every agent uses the offline model: no provider to call")
        return
    results = dict(zip(calls, await asyncio.gather(*calls.values()), strict=True))
    for agent_id, role, key in uses:
        name, base_url = key[0], key[1]
        where = f"{name} at {_host(base_url)}" if base_url else name
        failure = results[key]
        if failure is None:
            report.ok(f"agent {agent_id!r}: {role} {where} answered")
        else:
            report.problem(f"agent {agent_id!r}: {role} {where}: {failure}")


async def _call(model: Any, timeout: float) -> str | None:
    """None when the model answered, else why not (status and code, no provider text)."""
    try:
        async with asyncio.timeout(timeout + 5):
            await model.ainvoke(PROMPT)
    except TimeoutError:
        return f"no answer within {timeout:g} s (THREADKEEPER_LLM_TIMEOUT_SECONDS)"
    except Exception as exc:
        return provider_failure(exc)
    return None


def provider_failure(exc: BaseException) -> str:
    """``HTTP 401 (invalid_api_key)``, ``connection failed (ConnectError)``... Read through
    app/agents/provider_errors.py, the one reader of what a provider's failure says (the same
    status and code a failed run records), never its free text."""
    from app.agents import provider_errors  # openai/httpx: loaded only when a check failed

    status = provider_errors.provider_status(exc)
    code = provider_errors.provider_code(exc)
    if status is not None:
        return f"HTTP {status}" + (f" ({code})" if code else "")
    if provider_errors.is_connection_failure(exc):
        cause = exc.__cause__ or exc.__context__
        inner = f" ({type(cause).__name__})" if cause is not None else ""
        return f"connection failed: {type(exc).__name__}{inner}"
    return type(exc).__name__ + (f" ({code})" if code else "")


def _host(base_url: str) -> str:
    parts = urlsplit(base_url)
    host = parts.hostname or base_url
    return f"{host}:{parts.port}" if parts.port else host
