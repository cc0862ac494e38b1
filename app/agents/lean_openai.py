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

A stream's chunks that one read of the response brought together are merged where they only
extend the text or a tool call's arguments (app/agents/stream_coalescing.py), before
langchain-openai turns each into a message chunk; once output streams, reads may be paced
(``gather_seconds``) so that more of them come together.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from langchain_core.language_models import BaseChatModel
from openai import APIConnectionError, APITimeoutError, AsyncStream
from openai._httpx2 import request_exceptions, timeout_exceptions
from openai._streaming import ServerSentEvent, SSEDecoder, _SSELineDecoder

from app.agents.stream_coalescing import carries_output, coalesce, gather_next

#: ``create()`` keyword arguments that are request options, not body fields.
_OPTIONS = ("extra_headers", "extra_query", "extra_body", "timeout")


class LeanCompletions:
    """``chat.completions`` whose ``create`` skips the param transform and chunk typing."""

    #: How a stream is read (``AsyncStream[object]``: a chunk per event, as the SDK reads it;
    #: ``benchmarks/provider_client.py`` compares the two).
    stream_cls: type[AsyncStream[object]]

    def __init__(self, resource: Any, gather_seconds: float = 0.0) -> None:
        self._resource = resource
        self.stream_cls = paced(gather_seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._resource, name)

    async def create(self, **payload: Any) -> Any:
        from openai._base_client import make_request_options

        options = {k: payload.pop(k) for k in _OPTIONS if k in payload}
        stream = bool(payload.get("stream"))
        return await self._resource._post(
            "/chat/completions",
            body=payload,
            options=make_request_options(**options, security={"bearer_auth": True}),
            cast_to=object,  # the decoded JSON as it is
            stream=stream,
            stream_cls=self.stream_cls,
        )


class CoalescingStream(AsyncStream[object]):
    """The SDK's stream of decoded chunks, read a response read at a time: the events one read
    completed are decoded together and their chunks coalesced. The SDK's ``__stream__`` does the
    rest as for any stream (``[DONE]``, an ``error`` chunk raised as ``APIError``, the response
    closed at the end); its SSE line and event decoders are used as they are (private names,
    pinned by uv.lock and run by the tests)."""

    #: Seconds to let the next pieces gather before reading on once output streams
    #: (``gather_next``); 0: read on at once.
    gather_seconds: float = 0.0

    async def _iter_events(self) -> AsyncIterator[ServerSentEvent]:
        lines, events = _SSELineDecoder(), SSEDecoder()
        started = False
        try:
            async for data in self.response.aiter_bytes():
                out = list(_coalesced(list(events._decode_lines(lines.feed(data)))))
                for event in out:
                    yield event
                if self.gather_seconds:
                    chunks = [e.json() for e in out if isinstance(e, _Decoded)]
                    started = started or any(map(carries_output, chunks))
                    if gather_next(chunks, len(chunks) == len(out), started):
                        await asyncio.sleep(self.gather_seconds)
            for event in events._decode_lines(lines.finish()):
                yield event
        except timeout_exceptions() as err:
            raise APITimeoutError(request=self.response.request) from err
        except request_exceptions() as err:
            raise APIConnectionError(request=self.response.request) from err


@functools.cache
def paced(gather_seconds: float) -> type[CoalescingStream]:
    """``CoalescingStream`` pausing ``gather_seconds`` between reads once output streams (one
    class per value)."""
    if not gather_seconds:
        return CoalescingStream
    return type("PacedStream", (CoalescingStream,), {"gather_seconds": gather_seconds})


class _Decoded(ServerSentEvent):
    """An event whose data was decoded here (``json`` hands over the object, coalesced)."""

    def __init__(self, value: dict[str, Any]) -> None:
        super().__init__(data="{}")
        self._value = value

    def json(self) -> Any:
        return self._value


def _coalesced(events: list[ServerSentEvent]) -> Iterator[ServerSentEvent]:
    """``events`` in order, runs of unnamed chunk events decoded and coalesced; anything else
    (``[DONE]``, a named event, data that is no JSON object) as it came."""
    run: list[dict[str, Any]] = []
    for event in events:
        value = _chunk(event)
        if value is not None:
            run.append(value)
            continue
        yield from map(_Decoded, coalesce(run))
        run = []
        yield event
    yield from map(_Decoded, coalesce(run))


def _chunk(event: ServerSentEvent) -> dict[str, Any] | None:
    if event.event is not None or not event.data.startswith("{"):
        return None
    try:
        value = json.loads(event.data)
    except ValueError:
        return None  # the SDK's own decoding raises as it always did
    return value if isinstance(value, dict) and not value.get("error") else None


def lean(model: BaseChatModel, gather_seconds: float = 0.0) -> BaseChatModel:
    """``model`` with a lean ``async_client`` when it is a ``ChatOpenAI`` on chat completions
    (not the Responses API, which goes its own way), its streams' reads paced by
    ``gather_seconds``; any other model unchanged."""
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
        object.__setattr__(model, "async_client", LeanCompletions(client, gather_seconds))
    return model
