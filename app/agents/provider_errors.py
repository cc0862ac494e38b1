"""What a model provider's failure says, read once for everyone: the HTTP status it answered,
its own error code, how long it asked us to wait, whether trying again can help.

Why one home: the retry middleware decides on it, the run records it (``provider_status`` /
``provider_code``) and the ``run_failed`` log line shows it. Providers reach us through
different clients (openai, httpx, LangChain's ``ModelError`` family), often wrapped: every reader
here walks the ``__cause__`` / ``__context__`` chain. The provider's free text (its ``message``)
is for the server log only (redacted there), never for a client.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
from langchain_core.exceptions import ModelConnectionError, ModelError, ModelTimeoutError

from app.compression.overflow import is_context_overflow

try:  # openai is a dependency, but keep this module importable without it.
    import openai

    _OPENAI_ERRORS: tuple[type[BaseException], ...] = (openai.APIError,)
    _OPENAI_CONNECTION: tuple[type[BaseException], ...] = (openai.APIConnectionError,)
except ImportError:  # pragma: no cover
    _OPENAI_ERRORS = _OPENAI_CONNECTION = ()

#: Statuses worth another try: timeout, conflict, too early, rate limited, and any 5xx
#: (Anthropic's 529 "overloaded" among them).
TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})
#: Provider codes that say "busy, try later" whatever the status (or with none).
TRANSIENT_CODES = frozenset(
    {"overloaded", "overloaded_error", "server_error", "rate_limit_error", "server_overloaded"}
)
#: Codes that no retry fixes, even under a retryable status (OpenAI's 429 for an exhausted
#: quota; a key or model that is wrong).
PERMANENT_CODES = frozenset(
    {"insufficient_quota", "invalid_api_key", "model_not_found", "billing_hard_limit_reached"}
)
#: A code we pass on must look like one: a provider's identifier, never its prose.
_CODE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
#: Longest wait a ``Retry-After`` may ask for before we honour it no more (a provider asking
#: for ten minutes is better answered with a failure now).
MAX_RETRY_AFTER = 120.0


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _is_provider_one(exc: BaseException) -> bool:
    return isinstance(exc, (*_OPENAI_ERRORS, ModelError, httpx.HTTPError))


def is_provider_error(exc: BaseException) -> bool:
    """True if ``exc`` (or an exception it wraps) came from a model provider's client."""
    return any(_is_provider_one(e) for e in _chain(exc))


def _response(exc: BaseException) -> Any:
    """The HTTP response an error carries (httpx's, or the openai client's own kind), if any."""
    try:
        response = getattr(exc, "response", None)
    except RuntimeError:  # httpx.RequestError.response: "no response set"
        return None
    has_both = hasattr(response, "headers") and hasattr(response, "status_code")
    return response if has_both else None


def provider_status(exc: BaseException) -> int | None:
    """The HTTP status the provider answered (None: no answer, e.g. a refused connection)."""
    for e in _chain(exc):
        status = getattr(e, "status_code", None)
        if isinstance(status, int):
            return status
        response = _response(e)
        if response is not None:
            return response.status_code
    return None


def _body_error(exc: BaseException) -> dict[str, Any] | None:
    body: Any = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        return inner if isinstance(inner, dict) else None
    return None


def provider_code(exc: BaseException) -> str | None:
    """The provider's own error code (``invalid_api_key``, ``model_not_found``,
    ``rate_limit_exceeded``...), else its error type; None when it named neither (or sent
    something that is not an identifier)."""
    for e in _chain(exc):
        code = getattr(e, "code", None)
        error = _body_error(e) or {}
        for candidate in (code, error.get("code"), error.get("type")):
            if isinstance(candidate, str) and _CODE.fullmatch(candidate):
                return candidate
    return None


def provider_message(exc: BaseException) -> str | None:
    """The provider's own words (server log only: they may echo a key, which the log masks)."""
    for e in _chain(exc):
        error = _body_error(e)
        if error is not None and isinstance(error.get("message"), str):
            return str(error["message"])[:500]
        if _is_provider_one(e):
            return str(e)[:500]
    return None


def retry_after(exc: BaseException) -> float | None:
    """Seconds the provider asked us to wait (``retry-after-ms``, ``Retry-After`` in seconds or
    as an HTTP date); None when it did not say (or asked for more than ``MAX_RETRY_AFTER``)."""
    for e in _chain(exc):
        response = _response(e)
        if response is None:
            continue
        headers = response.headers
        seconds: float | None = None
        with_ms = headers.get("retry-after-ms")
        if with_ms:
            try:
                seconds = float(with_ms) / 1000
            except ValueError:
                seconds = None
        value = headers.get("retry-after")
        if seconds is None and value:
            try:
                seconds = float(value)
            except ValueError:
                when = email.utils.parsedate_to_datetime(value) if value else None
                seconds = when.timestamp() - time.time() if when is not None else None
        if seconds is not None and 0 <= seconds <= MAX_RETRY_AFTER:
            return seconds
        return None
    return None


def is_connection_failure(exc: BaseException) -> bool:
    """The provider could not be reached, or the connection broke or timed out mid-answer."""
    kinds = (*_OPENAI_CONNECTION, httpx.TransportError, ModelConnectionError, ModelTimeoutError)
    return any(isinstance(e, kinds) for e in _chain(exc))


def is_transient(exc: BaseException) -> bool:
    """Worth another try: a connection failure, a timeout, 408/409/425/429 or any 5xx, or a
    provider "overloaded" code. Never a context overflow (it is summarized instead), a 400, 401,
    403, 404, 422, nor an exhausted quota."""
    if not is_provider_error(exc) or is_context_overflow(exc):
        return False
    code = provider_code(exc)
    if code in PERMANENT_CODES:
        return False
    status = provider_status(exc)
    if status is not None:
        return status in TRANSIENT_STATUSES or status >= 500
    if code in TRANSIENT_CODES or is_connection_failure(exc):
        return True
    return any(isinstance(e, ModelError) and e.is_retryable for e in _chain(exc))


def endpoint_of(model: Any) -> str | None:
    """``host:port`` a LangChain chat model sends to (None when it names no URL)."""
    for attribute in ("openai_api_base", "base_url", "anthropic_api_url", "api_base"):
        url = getattr(model, attribute, None)
        if isinstance(url, str) and url:
            parsed = httpx.URL(url)
            port = parsed.port or (443 if parsed.scheme == "https" else 80)
            return f"{parsed.host}:{port}"
    return None
