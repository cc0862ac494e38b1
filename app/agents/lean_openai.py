"""The OpenAI chat-completions calls of ``ChatOpenAI`` without the SDK's per-call type work.

Profiled on the provider path (py-spy, benchmarks/providers.py), the service spent more CPU in
the openai SDK's typing than in anything of ours: ``create()`` walks every request (the whole
history and every tool schema, at each model call) through ``async_maybe_transform`` against the
``CompletionCreateParams`` TypedDicts, and builds a typed ``ChatCompletionChunk`` for every
streamed chunk, which langchain-openai at once turns back into a dict (``model_dump``). Here the
chat model's ``async_client`` (the ``chat.completions`` resource langchain-openai calls) is
wrapped so that ``create`` posts the payload langchain-openai built as it is and hands the
chunks (or the completion) over as the plain dicts they were decoded into. Everything else is
the SDK's own: the HTTP client and its connection pool, authentication, timeouts, and the error
mapping (a 429 is still ``openai.RateLimitError`` with its response and headers, which the retry
middleware and the run's diagnostics read). Any other use of the resource goes to the original.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel

#: ``create()`` keyword arguments that are request options, not body fields.
_OPTIONS = ("extra_headers", "extra_query", "extra_body", "timeout")


class LeanCompletions:
    """``chat.completions`` whose ``create`` skips the param transform and chunk typing."""

    def __init__(self, resource: Any) -> None:
        self._resource = resource

    def __getattr__(self, name: str) -> Any:
        return getattr(self._resource, name)

    async def create(self, **payload: Any) -> Any:
        from openai import AsyncStream
        from openai._base_client import make_request_options

        options = {k: payload.pop(k) for k in _OPTIONS if k in payload}
        stream = bool(payload.get("stream"))
        return await self._resource._post(
            "/chat/completions",
            body=payload,
            options=make_request_options(**options, security={"bearer_auth": True}),
            cast_to=object,  # the decoded JSON as it is
            stream=stream,
            stream_cls=AsyncStream[object],
        )


def lean(model: BaseChatModel) -> BaseChatModel:
    """``model`` with a lean ``async_client`` when it is a ``ChatOpenAI`` on chat completions
    (not the Responses API, which goes its own way); any other model unchanged."""
    try:
        from langchain_openai import ChatOpenAI
    except ImportError:  # pragma: no cover - a dependency
        return model
    client = getattr(model, "async_client", None)
    if (
        isinstance(model, ChatOpenAI)
        and client is not None
        and not isinstance(client, LeanCompletions)
        and not model.use_responses_api
    ):
        object.__setattr__(model, "async_client", LeanCompletions(client))
    return model
