"""Which chat model and summarizer an agent gets.

Why: one place decides between a provider (an agents-file ``provider:model``, or the
OpenAI-compatible endpoint of ``llm_base_url``) and the offline extractive default
(``app.offline``), so assembly never branches on configuration itself. ``is_offline`` is the one
"offline?" test.
"""

from __future__ import annotations

import os
from typing import Any

from langchain_core.language_models import BaseChatModel

from app.agents.lean_openai import lean
from app.agents.provider_http import client_options
from app.agents.resilience import provider_middleware
from app.agents.spec import OFFLINE, AgentsFileError, AgentSpec
from app.compression.summarizers import Summarizer, llm_summarizer
from app.config import CompressionSettings, ModelSettings, Settings
from app.offline.extractive import ExtractiveChatModel
from app.offline.summarizer import ExtractiveSummarizer

__all__ = [
    "agent_model",
    "agent_summarizer",
    "build_chat_model",
    "build_summarizer",
    "init_provider_model",
    "is_offline",
    "model_name",
    "provider_model",
    "provider_models",
    "resilience",
]


def is_offline(which: str, models: ModelSettings) -> bool:
    """A model named ``offline``, or none named and no LLM endpoint configured."""
    return which == OFFLINE or (not which and not models.llm_base_url)


def model_name(spec_model: str, settings: Settings) -> str:
    """The model a spec names, as shown by GetAgent (no URL, no key)."""
    if is_offline(spec_model, settings.models):
        return OFFLINE
    return spec_model or f"openai:{settings.models.llm_model}"


def agent_model(spec: AgentSpec, settings: Settings) -> BaseChatModel:
    """The agent's chat model; ``AgentsFileError`` when its provider model cannot be built."""
    if is_offline(spec.model, settings.models):
        return ExtractiveChatModel(kb_tool_name=spec.offline_lookup_tool)
    if not spec.model:
        return build_chat_model(settings.models)
    return provider_model(spec, spec.model, settings)


def agent_summarizer(
    spec: AgentSpec, settings: Settings, budget: CompressionSettings
) -> Summarizer:
    """The agent's summarizer (its ``summarizer``, else its ``model``), within its budget."""
    which = spec.summarizer or spec.model
    if is_offline(which, settings.models):
        return ExtractiveSummarizer()
    if not which:
        return build_summarizer(settings.models, budget)  # today's: THREADKEEPER_SUMMARY_MODEL
    return llm_summarizer(provider_model(spec, which, settings), budget)


def provider_models(spec: AgentSpec, settings: Settings) -> dict[str, tuple[tuple[str, ...], Any]]:
    """The provider models the agent calls by role (``model``, ``summarizer``; offline ones
    left out): (what names the endpoint and model: name, base URL, key variable; the model)."""
    found: dict[str, tuple[tuple[str, ...], Any]] = {}
    roles = [("model", spec.model), ("summarizer", spec.summarizer or spec.model)]
    for role, which in roles[1:] if spec.graph else roles:  # a graph calls its own model
        if is_offline(which, settings.models):
            continue
        if which:
            key = (which, spec.base_url, spec.api_key_env)
            found[role] = key, provider_model(spec, which, settings)
        else:  # the THREADKEEPER_LLM_* endpoint (a summarizer may name its own model there)
            m = settings.models
            model = m.llm_model if role == "model" else (m.summary_model or m.llm_model)
            key = (f"openai:{model}", m.llm_base_url, "THREADKEEPER_LLM_API_KEY")
            found[role] = key, build_chat_model(m, model=model)
    return found


def build_chat_model(settings: ModelSettings, *, model: str | None = None) -> BaseChatModel:
    """``ChatOpenAI`` against ``llm_base_url`` when configured, else ``ExtractiveChatModel``.

    ``max_retries=0``: retries are ours (app/agents/middlewares/provider_retry.py: bounded per
    run, reported in the run's events), and so is overflow recovery (the summary middleware).
    ``stream_usage=True`` so streamed runs still report token usage. ``lean``: without the
    openai SDK's per-call typing (app/agents/lean_openai.py); over the registry's aiohttp
    client when one is in effect (app/agents/provider_http.py).
    """
    if is_offline("", settings):
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
            **client_options(),
        ),
        settings.llm_stream_gather_seconds,
    )


def build_summarizer(settings: ModelSettings, compression: CompressionSettings) -> Summarizer:
    """``LLMSummarizer`` on the configured endpoint (``summary_model`` or ``llm_model``), else
    the offline ``ExtractiveSummarizer``."""
    if is_offline("", settings):
        return ExtractiveSummarizer()
    model = build_chat_model(settings, model=settings.summary_model or settings.llm_model)
    return llm_summarizer(model, compression)


def init_provider_model(
    spec: str,
    *,
    base_url: str | None,
    api_key: str | None,
    timeout: float,
    gather_seconds: float = 0.0,
) -> BaseChatModel:
    """``provider:model`` through LangChain's ``init_chat_model`` (an agents-file model).

    ``max_retries=0`` as above: retries and overflow recovery are ours. ``gather_seconds``:
    an OpenAI model's stream reads paced (``THREADKEEPER_LLM_STREAM_GATHER_SECONDS``).
    """
    from langchain.chat_models import init_chat_model

    kwargs: dict[str, Any] = {"timeout": timeout, "max_retries": 0}
    if base_url:
        kwargs["base_url"] = base_url
    if api_key:
        kwargs["api_key"] = api_key
    if spec.startswith("openai:"):
        kwargs["stream_usage"] = True
        kwargs.update(client_options())
    return lean(init_chat_model(spec, **kwargs), gather_seconds)


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
            gather_seconds=settings.models.llm_stream_gather_seconds,
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


def resilience(spec: AgentSpec, settings: Settings) -> list[Any]:
    """The agent's fallback models and transient-failure retries (``app.agents.resilience``)."""
    fallbacks = [provider_model(spec, which, settings) for which in spec.fallback_models]
    return provider_middleware(spec, settings, model_name(spec.model, settings), fallbacks)
