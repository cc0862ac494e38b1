"""Which chat model and summarizer a deployment gets.

Why: one place decides between a real OpenAI-compatible endpoint (``llm_base_url`` set) and the
offline extractive default (``app.offline``), so the agent factory never branches on
configuration itself.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel

from app.compression.summarizers import Summarizer, llm_summarizer
from app.config import CompressionSettings, ModelSettings
from app.offline.extractive import ExtractiveChatModel
from app.offline.summarizer import ExtractiveSummarizer

__all__ = ["build_chat_model", "build_summarizer", "init_provider_model"]


def build_chat_model(settings: ModelSettings, *, model: str | None = None) -> BaseChatModel:
    """``ChatOpenAI`` against ``llm_base_url`` when configured, else ``ExtractiveChatModel``.

    ``max_retries=0``: retries and overflow recovery are ours (the summary middleware), and a
    silent client retry would hide a 400 overflow or double a slow call. ``stream_usage=True``
    so streamed runs still report token usage.
    """
    if not settings.llm_base_url:
        return ExtractiveChatModel()
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        base_url=settings.llm_base_url,
        api_key=settings.llm_api_key or "not-needed",  # type: ignore[arg-type]
        model=model or settings.llm_model,
        timeout=settings.llm_timeout_seconds,
        max_retries=0,
        stream_usage=True,
    )


def build_summarizer(settings: ModelSettings, compression: CompressionSettings) -> Summarizer:
    """``LLMSummarizer`` on the configured endpoint (``summary_model`` or ``llm_model``), else
    the offline ``ExtractiveSummarizer``."""
    if not settings.llm_base_url:
        return ExtractiveSummarizer()
    model = build_chat_model(settings, model=settings.summary_model or settings.llm_model)
    return llm_summarizer(model, compression)


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
    return init_chat_model(spec, **kwargs)
