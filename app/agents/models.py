"""Which chat model a deployment gets (its summarizer: ``app.agents.summarizers``).

Why: one place decides between a real OpenAI-compatible endpoint (``llm_base_url`` set) and the
offline extractive default, so the agent factory never branches on configuration itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel

from app.agents.extractive import ExtractiveChatModel
from app.agents.lean_openai import lean
from app.config import ModelSettings

if TYPE_CHECKING:
    pass

__all__ = ["build_chat_model", "init_provider_model"]


def build_chat_model(settings: ModelSettings, *, model: str | None = None) -> BaseChatModel:
    """``ChatOpenAI`` against ``llm_base_url`` when configured, else ``ExtractiveChatModel``.

    ``max_retries=0``: retries are ours (app/agents/middlewares/provider_retry.py: bounded per
    run, reported in the run's events), and so is overflow recovery (the summary middleware).
    ``stream_usage=True`` so streamed runs still report token usage. ``lean``: without the
    openai SDK's per-call typing (app/agents/lean_openai.py).
    """
    if not settings.llm_base_url:
        return ExtractiveChatModel()
    from langchain_openai import ChatOpenAI

    return lean(
        ChatOpenAI(
            base_url=settings.llm_base_url,
            api_key=settings.llm_api_key or "not-needed",  # type: ignore[arg-type]
            model=model or settings.llm_model,
            timeout=settings.llm_timeout_seconds,
            max_retries=0,
            stream_usage=True,
        )
    )


def init_provider_model(
    spec: str, *, base_url: str | None, api_key: str | None, timeout: float
) -> BaseChatModel:
    """``provider:model`` through LangChain's ``init_chat_model`` (an agents-file model).

    ``max_retries=0`` as above: retries and overflow recovery are ours.
    """
    from langchain.chat_models import init_chat_model

    kwargs: dict[str, Any] = {"timeout": timeout, "max_retries": 0}
    if base_url:
        kwargs["base_url"] = base_url
    if api_key:
        kwargs["api_key"] = api_key
    if spec.startswith("openai:"):
        kwargs["stream_usage"] = True
    return lean(init_chat_model(spec, **kwargs))
