"""Recognise a provider "context window exceeded" error, whatever wraps it.

langchain-openai with openai 3.x does not map a 400 ``context_length_exceeded`` to
``langchain_core.exceptions.ContextOverflowError`` (see DESIGN 6), so we also look at the
provider's error code and at the known 400 message texts, through the ``__cause__`` chain.
"""

from __future__ import annotations

from typing import Any

from langchain_core.exceptions import ContextOverflowError, ModelError

try:  # openai is a dependency, but keep this module importable without it.
    import openai

    _OPENAI_ERRORS: tuple[type[BaseException], ...] = (openai.APIStatusError,)
except ImportError:  # pragma: no cover
    _OPENAI_ERRORS = ()

OVERFLOW_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
OVERFLOW_MESSAGES = (
    "maximum context length",
    "context_length_exceeded",
    "prompt is too long",
    "context window",
    "input is too long",
    "too many input tokens",
    "exceeds the context",
    "reduce the length of the messages",
)


def _error_code(exc: BaseException) -> str | None:
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        return code
    body: Any = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("code"), str):
            return str(inner["code"])
    return None


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if status is None:
        status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def _message_matches(exc: BaseException) -> bool:
    text = " ".join(
        str(part) for part in (exc, getattr(exc, "message", ""), getattr(exc, "body", ""))
    )
    lowered = text.lower()
    return any(marker in lowered for marker in OVERFLOW_MESSAGES)


def _is_overflow_one(exc: BaseException) -> bool:
    if isinstance(exc, ContextOverflowError):
        return True
    if _error_code(exc) in OVERFLOW_CODES:
        return True
    status = _status(exc)
    provider_error = isinstance(exc, (*_OPENAI_ERRORS, ModelError)) or status is not None
    return provider_error and status in (None, 400, 413) and _message_matches(exc)


def is_context_overflow(exc: BaseException) -> bool:
    """True if ``exc`` (or an exception it wraps) says the prompt exceeded the context window."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _is_overflow_one(current):
            return True
        current = current.__cause__ or current.__context__
    return False
