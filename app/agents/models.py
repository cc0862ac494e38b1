"""Which chat model a deployment gets (its summarizer: ``app.agents.summarizers``).

Why: one place decides between a real OpenAI-compatible endpoint (``llm_base_url`` set) and the
offline extractive default, so the agent factory never branches on configuration itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from langchain_core.language_models import BaseChatModel

from app.agents.extractive import ExtractiveChatModel
from app.config import Settings

if TYPE_CHECKING:
    pass

__all__ = ["build_chat_model"]


def build_chat_model(settings: Settings, *, model: str | None = None) -> BaseChatModel:
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
