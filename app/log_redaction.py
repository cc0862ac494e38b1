"""Mask secrets in log output, wherever in a log line they hide.

Why: a key-name check (``api_key=...``) misses a secret inside a value: a provider error that
echoes the API key, a driver message with a connection URL, a header dump in a traceback. This
masks, in every string of a structlog event (nested dicts/lists included, the formatted
traceback too) and in every stdlib log record: ``sk-...`` style keys, ``Bearer <value>``,
passwords in URLs, and each configured secret (API keys, provider and search keys, the database
password). The secrets live in one process-wide registry so loggers cached before a
reconfiguration still use the current ones.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, MutableMapping
from typing import Any

from app.config import Settings
from app.db.urls import secrets_in

MASK = "[redacted]"
#: Configured secrets shorter than this are not masked by value (they would mangle every line).
MIN_SECRET_LENGTH = 6

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"), MASK),
    (re.compile(r"(?i)\b(bearer)(\s+)(?!\[redacted\])[^\s\"',;)}\]]+"), rf"\1\2{MASK}"),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s:/@\"']+):[^\s@/\"']+@"), rf"\1:{MASK}@"),
)


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        kept = sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH}, key=len)
        self._secrets: re.Pattern[str] | None = (
            re.compile("|".join(re.escape(s) for s in reversed(kept))) if kept else None
        )

    def text(self, value: str) -> str:
        if self._secrets is not None:
            value = self._secrets.sub(MASK, value)
        for pattern, replacement in _PATTERNS:
            value = pattern.sub(replacement, value)
        return value

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.value(v) for v in value)
        if isinstance(value, BaseException):
            return self.text(repr(value))
        return value


_active = Redactor()


def configure_secrets(secrets: Iterable[str]) -> None:
    """Replace the process-wide set of configured secrets."""
    global _active
    _active = Redactor(secrets)


def redact_text(value: str) -> str:
    return _active.text(value)


def redact_event(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor; runs after ``format_exc_info`` so tracebacks are masked too."""
    for key in list(event):
        event[key] = _active.value(event[key])
    return event


class RedactingFilter(logging.Filter):
    """For stdlib handlers (uvicorn, httpx, openai, ...): the rendered message and traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, dict):
            # A structlog event on its way to ProcessorFormatter: ``redact_event`` masked it,
            # and turning it into text here would cost it its JSON fields.
            return True
        try:
            message = record.getMessage()
        except Exception:  # bad %-args: the handler reports it; never fail the caller here
            return True
        record.msg = redact_text(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        return True


#: Environment variables whose values are secrets by their name: provider keys read by
#: LangChain's integrations themselves (``OPENAI_API_KEY``...), and the variables an agents file
#: names in ``api_key_env`` (they hold keys).
_SECRET_NAME = re.compile(r"(?i)(API_KEY|_KEY|_TOKEN|_SECRET|_PASSWORD)$")


def secrets_of(settings: Settings) -> list[str]:
    """The configured values that must never be logged."""
    found = [
        *(v for k, v in os.environ.items() if _SECRET_NAME.search(k)),
        *settings.auth.api_key_map(),
        settings.models.llm_api_key,
        settings.web_search.web_search_api_key,
        settings.workdir.s3_secret_access_key,
        settings.auth.stream_token_secret,
        # The S3 secret's standard home, read by obstore itself: masked all the same.
        os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
    ]
    for url in (settings.database.database_url, settings.database.database_direct_url):
        found.extend(secrets_in(url) if url else [])
    return found
