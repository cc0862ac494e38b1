"""structlog configuration: JSON lines with request ids, and no secrets."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, MutableMapping
from typing import Any

import structlog

from app.log_redaction import RedactingFilter, configure_secrets, redact_event

_SECRET_KEYS = ("authorization", "api_key", "password", "token", "secret")


def _redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Defence in depth: a key that looks secret never reaches the log sink."""
    for key in list(event):
        lowered = key.lower()
        if any(s in lowered for s in _SECRET_KEYS) and not lowered.endswith("_tokens"):
            event[key] = "[redacted]"
    return event


def configure_logging(level: str = "INFO", json: bool = True, secrets: Iterable[str] = ()) -> None:
    """``secrets``: configured values masked wherever they appear (see app.log_redaction)."""
    configure_secrets(secrets)
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _redact,
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        redact_event,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=level.upper(), stream=sys.stderr, format="%(message)s")
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
    for noisy in ("httpx", "httpx2", "httpcore", "openai", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
