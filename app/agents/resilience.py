"""An agent's model calls made to last: its fallback models and the transient-failure retries,
as the middleware ``build_agent_runtime`` places nearest the model (inside the summary
middleware, so a context overflow still reaches it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import structlog
from langchain.agents.middleware import AgentMiddleware, ModelFallbackMiddleware
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel
from langgraph.errors import GraphBubbleUp

from app.agents.middlewares.provider_retry import ProviderRetryMiddleware
from app.agents.provider_errors import provider_code, provider_status
from app.agents.spec import AgentSpec
from app.compression.overflow import is_context_overflow
from app.config import Settings

log = structlog.get_logger(__name__)


class ProviderFallbackMiddleware(ModelFallbackMiddleware[Any, Any]):  # type: ignore[type-var]
    """LangChain's ``ModelFallbackMiddleware``, except that the primary model's context overflow
    is no reason to switch models: it goes on to the summary middleware, which summarizes and
    calls again (a fallback would get the same oversized request)."""

    @property
    def name(self) -> str:
        return "ProviderFallbackMiddleware"

    async def awrap_model_call(self, request: ModelRequest[Any], handler: Any) -> Any:
        try:
            return await handler(request)
        except GraphBubbleUp:
            raise
        except Exception as exc:
            if is_context_overflow(exc):
                raise
            failed = exc
        log.warning(
            "model_fallback",
            error_type=type(failed).__name__,
            provider_status=provider_status(failed),
            provider_code=provider_code(failed),
            fallbacks=len(self.models),
        )
        first = True

        async def after_primary(req: ModelRequest[Any]) -> ModelResponse[Any]:
            nonlocal first
            if first:  # the primary already failed, above: not called twice
                first = False
                raise failed
            result: ModelResponse[Any] = await handler(req)
            return result

        return await super().awrap_model_call(request, after_primary)


def provider_middleware(
    spec: AgentSpec, settings: Settings, model: str, fallbacks: Sequence[BaseChatModel] = ()
) -> list[AgentMiddleware[Any, Any, Any]]:
    """The agent's (``model``, shown as named) fallback models, if any, then the retries each
    model gets, with its ``max_concurrency``; outermost first."""
    out: list[AgentMiddleware[Any, Any, Any]] = []
    if fallbacks:
        out.append(ProviderFallbackMiddleware(*fallbacks))
    models = settings.models
    out.append(
        ProviderRetryMiddleware(
            model=model,
            max_retries=models.llm_max_retries,
            max_wait_seconds=models.llm_retry_max_wait_seconds,
            run_max_retries=models.llm_run_max_retries,
            max_concurrency=spec.max_concurrency,
        )
    )
    return out
