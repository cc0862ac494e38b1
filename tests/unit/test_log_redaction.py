"""Secrets never reach the log sink, wherever they hide in a log line (issue 10, item 2)."""

from __future__ import annotations

import io
import json
import logging

import pytest
import structlog

from app.config import load_settings
from app.log_redaction import MASK, RedactingFilter, redact_text, secrets_of
from app.logging import configure_logging

PROVIDER_KEY = "prov-9f8e7d6c5b4a"  # no sk- prefix: only the configured-secret rule catches it
CLIENT_KEY = "client-key-0123456789"
SEARCH_KEY = "tvly-abcdef123456"
DB_PASSWORD = "pg-pass-4242"
OPENAI_STYLE = "sk-proj-AbCdEf0123456789"
BEARER = "opaque.token.value"
S3_SECRET = "s3-SECRET-4e1b"


@pytest.fixture
def settings_secrets() -> list[str]:
    settings = load_settings(
        {},
        api_keys=f"alice:{CLIENT_KEY}",
        llm_api_key=PROVIDER_KEY,
        web_search_api_key=SEARCH_KEY,
        s3_secret_access_key=S3_SECRET,
        database_url=f"postgresql://app:{DB_PASSWORD}@db.internal:5432/tk",
    )
    return secrets_of(settings)


def test_configured_secrets_come_from_every_setting(settings_secrets: list[str]) -> None:
    assert {CLIENT_KEY, PROVIDER_KEY, SEARCH_KEY, DB_PASSWORD, S3_SECRET} <= set(settings_secrets)


def test_the_standard_s3_secret_variable_is_masked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The S3 secret now lives in ``AWS_SECRET_ACCESS_KEY`` (obstore reads it): still masked."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", S3_SECRET)
    assert S3_SECRET in secrets_of(load_settings({}))


def test_structlog_events_are_masked_everywhere(
    settings_secrets: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("INFO", json=True, secrets=settings_secrets)
    log = structlog.get_logger("test_log_redaction")
    try:
        raise RuntimeError(f"provider said: invalid key {PROVIDER_KEY}")
    except RuntimeError:
        log.error(
            "provider_failed",
            error=f"Incorrect API key provided: {OPENAI_STYLE} (search {SEARCH_KEY})",
            nested={"headers": {"authorization_header": f"Bearer {BEARER}"}, "keys": [CLIENT_KEY]},
            url=f"postgresql://app:{DB_PASSWORD}@db.internal:5432/tk",
            exc_info=True,
        )
    out = capsys.readouterr().err
    line = json.loads(out.strip().splitlines()[-1])
    for secret in (PROVIDER_KEY, CLIENT_KEY, SEARCH_KEY, DB_PASSWORD, OPENAI_STYLE, BEARER):
        assert secret not in out, secret
    assert line["event"] == "provider_failed"
    assert line["error"] == f"Incorrect API key provided: {MASK} (search {MASK})"
    assert line["nested"] == {"headers": {"authorization_header": f"Bearer {MASK}"}, "keys": [MASK]}
    assert line["url"] == f"postgresql://app:{MASK}@db.internal:5432/tk"
    assert "RuntimeError: provider said: invalid key" in line["exception"]  # still useful


def test_stdlib_records_are_masked(settings_secrets: list[str]) -> None:
    configure_logging("INFO", json=True, secrets=settings_secrets)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("test_log_redaction.stdlib")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            raise ValueError(f"echo {OPENAI_STYLE}")
        except ValueError:
            logger.exception("retrying with Authorization: Bearer %s key=%s", BEARER, PROVIDER_KEY)
    finally:
        logger.removeHandler(handler)
    out = stream.getvalue()
    for secret in (PROVIDER_KEY, OPENAI_STYLE, BEARER):
        assert secret not in out, out
    assert "retrying with Authorization: Bearer [redacted]" in out
    assert "ValueError: echo [redacted]" in out


def test_masking_twice_changes_nothing(settings_secrets: list[str]) -> None:
    """A record passes every root handler's filter: the second pass must keep it as is."""
    configure_logging("INFO", json=True, secrets=settings_secrets)
    once = redact_text(f"Bearer {BEARER} {OPENAI_STYLE} postgresql://app:{DB_PASSWORD}@h/db")
    assert once == f"Bearer {MASK} {MASK} postgresql://app:{MASK}@h/db"
    assert redact_text(once) == once


def test_short_configured_values_are_not_masked_by_value() -> None:
    """A 1-character test key must not turn every "k" of every log line into a mask."""
    configure_logging("INFO", json=True, secrets=["k"])
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("test_log_redaction.short")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("keep talking")
    finally:
        logger.removeHandler(handler)
    assert stream.getvalue() == "keep talking\n"
