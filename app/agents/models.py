"""Which chat model and summarizer a deployment gets.

Why: one place decides between a real OpenAI-compatible endpoint (``llm_base_url`` set) and the
offline extractive default (``app.offline``), so the agent factory never branches on
configuration itself.
"""

from __future__ import annotations

import os
from typing import Any

from langchain_core.language_models import BaseChatModel

from app.agents.lean_openai import lean
from app.agents.spec import AgentsFileError, AgentSpec
from app.compression.summarizers import Summarizer, llm_summarizer
from app.config import CompressionSettings, ModelSettings, Settings
from app.offline.extractive import ExtractiveChatModel
from app.offline.summarizer import ExtractiveSummarizer

__all__ = ["build_chat_model", "build_summarizer", "init_provider_model", "provider_model"]


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
    return lean(init_chat_model(spec, **kwargs))


def _api_key(spec: AgentSpec) -> str | None:
    if not spec.api_key_env:
        return None
    value = os.environ.get(spec.api_key_env)
    if not value:
        raise AgentsFileError(
            f"agent {spec.id!r}: field 'api_key_env': environment variable "
            f"{spec.api_key_env} is not set"
        )
    return value


def provider_model(spec: AgentSpec, which: str, settings: Settings) -> BaseChatModel:
    """An agents-file model (``which``: its model, a fallback or its summarizer) with the
    agent's base URL and key; ``AgentsFileError`` naming the field when it cannot be built."""
    try:
        return init_provider_model(
            which,
            base_url=spec.base_url or None,
            api_key=_api_key(spec),
            timeout=settings.models.llm_timeout_seconds,
        )
    except AgentsFileError:
        raise
    except Exception as exc:  # unknown provider, its package missing, bad arguments
        roles = {**dict.fromkeys(spec.fallback_models, "fallback_models"), spec.model: "model"}
        field = roles.get(which, "summarizer")
        raise AgentsFileError(
            f"agent {spec.id!r}: field '{field}': {which!r} cannot be built "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
        ) from exc
