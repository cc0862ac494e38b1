"""The libpq URL forms operators paste, read into asyncpg's arguments and psycopg's conninfo
(app/db/urls.py); what a driver cannot honour is refused with one line naming it."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from app.config import load_settings
from app.db.urls import DatabaseUrlError, libpq_url, parse, redacted, secrets_in


@pytest.fixture(scope="module")
def ca_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real CA certificate (Python's own test CA is not shipped; make one with openssl)."""
    import subprocess

    d = tmp_path_factory.mktemp("ca")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=unit ca", "-keyout", "ca.key", "-out", "ca.crt"],
        cwd=d, check=True, capture_output=True,
    )  # fmt: skip
    return d / "ca.crt"


def test_postgres_scheme_and_the_parts_of_a_url() -> None:
    url = parse("postgres://tk:p%40ss@db.example.com:6543/app?application_name=billing")
    kwargs = url.asyncpg_kwargs(application_name="threadkeeper-sql", timeout=7)
    assert kwargs["host"] == "db.example.com"
    assert kwargs["port"] == 6543
    assert kwargs["user"] == "tk"
    assert kwargs["password"] == "p@ss"  # percent-decoded
    assert kwargs["database"] == "app"
    assert kwargs["timeout"] == 7
    # The operator's application_name wins over the pool's (libpq's fallback rule).
    assert kwargs["server_settings"] == {"application_name": "billing"}
    assert url.describe() == "db.example.com:6543/app"


def test_the_pools_name_when_the_url_names_none_and_a_driver_suffix_is_dropped() -> None:
    url = parse("postgresql+asyncpg://tk@db/app")
    kwargs = url.asyncpg_kwargs(application_name="threadkeeper-sql", timeout=1)
    assert kwargs["server_settings"] == {"application_name": "threadkeeper-sql"}
    assert kwargs["ssl"] is None  # libpq's default (prefer): asyncpg's own default
    info = conninfo_to_dict(url.conninfo(fallback_application_name="threadkeeper-checkpointer"))
    assert info["fallback_application_name"] == "threadkeeper-checkpointer"
    assert "application_name" not in info
    assert libpq_url("postgresql+psycopg://tk@db/app") == "postgresql://tk@db/app"


def test_options_and_target_session_attrs_reach_both_drivers() -> None:
    url = parse(
        "postgresql://tk@h1:5432,h2:5433/app?target_session_attrs=read-write"
        "&options=-c%20statement_timeout%3D5s"
    )
    kwargs = url.asyncpg_kwargs(application_name="x", timeout=1)
    assert kwargs["host"] == ["h1", "h2"] and kwargs["port"] == [5432, 5433]
    assert kwargs["target_session_attrs"] == "read-write"
    assert kwargs["server_settings"]["options"] == "-c statement_timeout=5s"
    info = conninfo_to_dict(url.conninfo())
    assert info["options"] == "-c statement_timeout=5s"
    assert info["target_session_attrs"] == "read-write"
    assert info["host"] == "h1,h2"


def test_sslmode_require_encrypts_without_verifying() -> None:
    ctx = parse("postgresql://tk@db/app?sslmode=require").asyncpg_kwargs(
        application_name="x", timeout=1
    )["ssl"]
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_NONE and not ctx.check_hostname


def test_verify_full_verifies_the_ca_and_the_host(ca_file: Path) -> None:
    ctx = parse(f"postgresql://tk@db/app?sslmode=verify-full&sslrootcert={ca_file}").asyncpg_kwargs(
        application_name="x", timeout=1
    )["ssl"]
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "unit ca"),),)]


def test_verify_ca_verifies_the_ca_only_and_require_with_a_root_cert_does_too(
    ca_file: Path,
) -> None:
    for mode in ("verify-ca", "require"):  # libpq: require + sslrootcert behaves as verify-ca
        ctx = parse(f"postgresql://tk@db/app?sslmode={mode}&sslrootcert={ca_file}").asyncpg_kwargs(
            application_name="x", timeout=1
        )["ssl"]
        assert isinstance(ctx, ssl.SSLContext)
        assert ctx.verify_mode == ssl.CERT_REQUIRED and not ctx.check_hostname, mode


def test_disable_and_prefer() -> None:
    assert (
        parse("postgresql://db/app?sslmode=disable").asyncpg_kwargs(
            application_name="x", timeout=1
        )["ssl"]
        is False
    )
    assert (
        parse("postgresql://db/app?sslmode=prefer").asyncpg_kwargs(application_name="x", timeout=1)[
            "ssl"
        ]
        == "prefer"
    )


@pytest.mark.parametrize(
    ("url", "names"),
    [
        ("postgresql://db/app?channel_binding=require", "channel_binding"),
        ("postgresql://db/app?keepalives=1", "keepalives"),
        ("postgresql://db/app?bogus=1", "bogus"),
        ("postgresql://db/app?sslmode=verify-full", "sslrootcert"),
        ("postgresql://db/app?sslmode=verify-ca", "sslrootcert"),
        ("postgresql://db/app?sslmode=required", "sslmode"),
        ("postgresql://db/app?sslmode=require&sslrootcert=/nonexistent/ca.crt", "sslrootcert"),
        ("postgresql://db/app?sslcert=/x.crt&sslkey=/x.key", "sslmode"),
        ("postgresql://db/app?target_session_attrs=fastest", "target_session_attrs"),
        ("postgresql://db/app?connect_timeout=soon", "connect_timeout"),
    ],
)
def test_what_a_driver_cannot_honour_is_refused_in_one_line(url: str, names: str) -> None:
    with pytest.raises(DatabaseUrlError) as caught:
        parse(url)
    message = str(caught.value)
    assert names in message and "\n" not in message
    # ... and the settings refuse to load with it (serve exits 2 with that line).
    with pytest.raises(ValueError, match=names):
        load_settings({"DATABASE_URL": url})


def test_the_direct_url_is_checked_too() -> None:
    with pytest.raises(ValueError, match=r"THREADKEEPER_DATABASE_DIRECT_URL: .*channel_binding"):
        load_settings(
            {
                "DATABASE_URL": "postgresql://db/app",
                "THREADKEEPER_DATABASE_DIRECT_URL": "postgresql://db/app?channel_binding=require",
            }
        )
    with pytest.raises(ValueError, match="THREADKEEPER_DATABASE_POOLER"):
        load_settings({"THREADKEEPER_DATABASE_POOLER": "statement"})


def test_secrets_are_found_and_masked() -> None:
    url = "postgresql://tk:s3cr%2Ft@db/app?sslmode=require&sslpassword=key-pass"
    assert sorted(secrets_in(url)) == ["key-pass", "s3cr/t"]
    shown = redacted(url)
    assert "s3cr" not in shown and "key-pass" not in shown
    assert shown == "postgresql://tk:***@db/app?sslmode=require&sslpassword=***"


def test_what_the_url_leaves_out_is_left_to_the_driver_as_libpq_does() -> None:
    """No host: asyncpg falls back like libpq (PGHOST, the Unix socket), never a made-up TCP
    localhost; a Unix socket directory as ``host`` is passed through."""
    kwargs = parse("postgresql:///app").asyncpg_kwargs(application_name="x", timeout=1)
    assert kwargs["host"] is None and kwargs["port"] is None and kwargs["user"] is None
    assert kwargs["database"] == "app"
    socket = parse("postgresql:///app?host=/var/run/postgresql&port=5433")
    kwargs = socket.asyncpg_kwargs(application_name="x", timeout=1)
    assert kwargs["host"] == "/var/run/postgresql" and kwargs["port"] == 5433


def test_settings_report_and_log_redaction_mask_both_urls_secrets() -> None:
    from app.log_redaction import secrets_of
    from app.settings_report import report

    settings = load_settings(
        {
            "DATABASE_URL": "postgresql://tk:pooled-pw-1@pgbouncer:6432/tk?sslmode=require",
            "THREADKEEPER_DATABASE_POOLER": "transaction",
            "THREADKEEPER_DATABASE_DIRECT_URL": (
                "postgresql://tk:direct-pw-2@db:5432/tk?sslmode=require&sslpassword=key-pass-3"
            ),
        }
    )
    text = report(settings, environ={})
    lines = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    assert lines["DATABASE_URL"] == "postgresql://tk:***@pgbouncer:6432/tk?sslmode=require"
    assert lines["THREADKEEPER_DATABASE_DIRECT_URL"] == (
        "postgresql://tk:***@db:5432/tk?sslmode=require&sslpassword=***"
    )
    assert lines["THREADKEEPER_DATABASE_POOLER"] == "transaction"
    for secret in ("pooled-pw-1", "direct-pw-2", "key-pass-3"):
        assert secret not in text
        assert secret in secrets_of(settings)
