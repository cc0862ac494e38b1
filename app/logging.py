"""structlog configuration: JSON lines with request ids, and no secrets."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

import structlog

from app.log_redaction import RedactingFilter, configure_secrets, redact_event

_HANDLER_NAME = "threadkeeper"
_SECRET_KEYS = ("authorization", "api_key", "password", "token", "secret")


def _redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Defence in depth: a key that looks secret never reaches the log sink."""
    for key in list(event):
        lowered = key.lower()
        if any(s in lowered for s in _SECRET_KEYS) and not lowered.endswith("_tokens"):
            event[key] = "[redacted]"
    return event


def _drop_color_message(
    _: Any, __: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """uvicorn attaches an ANSI-coloured copy of each message as an ``extra``."""
    event.pop("color_message", None)
    return event


def configure_logging(level: str = "INFO", json: bool = True, secrets: Iterable[str] = ()) -> None:
    """structlog and the stdlib (uvicorn, libraries, ``warnings``) through ONE root handler.

    With ``json`` every line on stderr is a JSON object: foreign records get the same
    timestamp/level/request id/redaction chain as our own events. ``secrets``: configured
    values masked wherever they appear (see app.log_redaction).
    """
    configure_secrets(secrets)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
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
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.ExtraAdder(), _drop_color_message, *shared],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    handler.set_name(_HANDLER_NAME)
    root = logging.getLogger()
    # Replace our previous handler (reconfiguration), keep foreign ones (pytest's capture).
    root.handlers = [h for h in root.handlers if h.get_name() != _HANDLER_NAME] + [handler]
    root.setLevel(numeric)
    for each in root.handlers:
        if not any(isinstance(f, RedactingFilter) for f in each.filters):
            each.addFilter(RedactingFilter())
    # uvicorn's own handlers (if any configured them) would print plain text: route to root.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers = []
        logging.getLogger(name).propagate = True
    logging.captureWarnings(True)
    for noisy in ("httpx", "httpx2", "httpcore", "openai", "asyncio", "mcp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def warn_unknown_settings(environ: Mapping[str, str] | None = None) -> None:
    """One line naming every ``THREADKEEPER_*`` variable no setting reads (a typo is silent
    otherwise: the default applies), and one per deprecated variable still set."""
    from app.config import deprecated_settings, unknown_settings

    log = structlog.get_logger("app.config")
    unknown = unknown_settings(environ)
    if unknown:
        log.warning(
            "unknown_settings", names=unknown, hint="no setting reads these variables; typo?"
        )
    for old, new in deprecated_settings(environ).items():
        log.warning(
            "deprecated_setting",
            name=old,
            use=new,
            hint=f"{old} still works in this release and is removed in the next; set {new}",
        )
