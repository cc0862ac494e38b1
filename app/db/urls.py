"""One database URL, as libpq takes it, in; what each driver needs out.

Operators paste the URL their platform hands out (``postgres://...?sslmode=require``,
``verify-full`` with ``sslrootcert``, a client certificate, ``target_session_attrs``,
``options=-c ...``). libpq (psycopg: the checkpointer and the NOTIFY listener) understands all of
it; asyncpg (SQLAlchemy: the repositories) takes keyword arguments instead, and a query parameter
it does not know made ``serve`` die with ``connect() got an unexpected keyword argument``. Here the
URL is parsed once by libpq's own parser (``psycopg.conninfo.conninfo_to_dict``: percent-decoding,
IPv6, several hosts, exactly libpq's parameter names) and turned into:

* ``asyncpg_kwargs()``: host(s), port(s), user, password, database, an ``ssl.SSLContext`` built
  the way libpq would (``require``: encrypted, the server certificate not verified unless an
  ``sslrootcert`` is given; ``verify-ca``: signed by that CA; ``verify-full``: and issued for the
  host name), ``target_session_attrs`` and the startup parameters (``application_name``,
  ``options``);
* ``conninfo()``: the same URL for libpq, scheme normalised, with a fallback application name.

A parameter asyncpg cannot honour (``channel_binding``, ``gssencmode``, keepalives...) is refused
with a ``DatabaseUrlError`` naming it: the settings refuse to load, so ``serve`` exits 2 with one
line instead of failing later or silently ignoring it.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from psycopg import ProgrammingError
from psycopg.conninfo import conninfo_to_dict, make_conninfo

#: The parameters both drivers honour (libpq's names); anything else is refused.
SUPPORTED = frozenset(
    {
        "host",
        "port",
        "user",
        "password",
        "dbname",
        "passfile",
        "connect_timeout",
        "application_name",
        "fallback_application_name",
        "options",
        "target_session_attrs",
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "sslpassword",
        "sslcrl",
        "ssl_min_protocol_version",
        "ssl_max_protocol_version",
    }
)
SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
TARGET_SESSION_ATTRS = ("any", "read-write", "read-only", "primary", "standby", "prefer-standby")
TLS_VERSIONS = {"TLSv1": "TLSv1", "TLSv1.1": "TLSv1_1", "TLSv1.2": "TLSv1_2", "TLSv1.3": "TLSv1_3"}


class DatabaseUrlError(ValueError):
    """The URL cannot be used as given; the message is one line naming the parameter."""


@dataclass(frozen=True)
class DatabaseUrl:
    """A parsed libpq URL. ``params``: libpq's keywords (``host``, ``sslmode``...), decoded."""

    params: Mapping[str, str]
    _ssl: ssl.SSLContext | str | bool | None = field(default=None, compare=False, repr=False)

    @property
    def hosts(self) -> list[str]:
        return self.params.get("host", "localhost").split(",")

    @property
    def ports(self) -> list[int]:
        raw = self.params.get("port", "5432").split(",")
        if len(raw) == 1:
            raw = raw * len(self.hosts)
        return [int(p or 5432) for p in raw]

    @property
    def database(self) -> str:
        return self.params.get("dbname") or self.params.get("user") or "postgres"

    def describe(self) -> str:
        """``host:port/db`` (every host, never the password)."""
        hosts = ",".join(f"{h}:{p}" for h, p in zip(self.hosts, self.ports, strict=False))
        return f"{hosts}/{self.database}"

    def sqlalchemy_url(self) -> str:
        """What SQLAlchemy is given to pick its dialect. The connections themselves are opened
        with ``asyncpg_kwargs()`` (``async_creator_fn``), so nothing but the dialect is read
        from it; it names the first host for logs and tracing (no password)."""
        return f"postgresql+asyncpg://{self.hosts[0]}:{self.ports[0]}/{self.database}"

    def asyncpg_kwargs(self, *, application_name: str, timeout: float) -> dict[str, Any]:
        """``asyncpg.connect`` keyword arguments. ``application_name``: this pool's name, used
        unless the URL names one (libpq's fallback_application_name)."""
        p = self.params
        server_settings = {
            "application_name": p.get("application_name")
            or p.get("fallback_application_name")
            or application_name
        }
        if p.get("options"):
            server_settings["options"] = p["options"]
        # What the URL leaves out (host, port, user, database) is left to asyncpg, which falls
        # back as libpq does (PGHOST..., the Unix socket, the user's name).
        kwargs: dict[str, Any] = {
            "host": _one_or_list(self.hosts) if "host" in p else None,
            "port": _one_or_list(self.ports) if "port" in p else None,
            "user": p.get("user"),
            "password": p.get("password"),
            "database": p.get("dbname"),
            "ssl": self._ssl,
            "server_settings": server_settings,
            "timeout": float(p["connect_timeout"]) if p.get("connect_timeout") else timeout,
        }
        if p.get("passfile"):
            kwargs["passfile"] = p["passfile"]
        if p.get("target_session_attrs"):
            kwargs["target_session_attrs"] = p["target_session_attrs"]
        return kwargs

    def conninfo(self, **extra: Any) -> str:
        """The libpq connection string (psycopg), plus ``extra`` keywords."""
        return make_conninfo("", **{**self.params, **extra})


def _one_or_list(values: list[Any]) -> Any:
    return values if len(values) > 1 else values[0]


def parse(url: str) -> DatabaseUrl:
    """Parse and check ``url`` (``postgresql://``, ``postgres://``, a ``+driver`` suffix, or a
    ``key=value`` conninfo); raises ``DatabaseUrlError`` with one line."""
    return _parse(url)


@functools.lru_cache(maxsize=16)
def _parse(url: str) -> DatabaseUrl:
    try:
        raw = conninfo_to_dict(_normalized(url))
    except ProgrammingError as exc:
        raise DatabaseUrlError(f"the database URL is not valid: {_one_line(exc)}") from None
    params = {k: str(v) for k, v in raw.items() if v is not None}
    unsupported = sorted(set(params) - SUPPORTED)
    if unsupported:
        raise DatabaseUrlError(
            f"the database URL parameter {unsupported[0]} is not supported (asyncpg, the "
            f"repositories' driver, cannot honour it); remove it. Supported: "
            f"{', '.join(sorted(SUPPORTED - {'host', 'port', 'user', 'password', 'dbname'}))}"
        )
    _check_choice(params, "sslmode", SSLMODES)
    _check_choice(params, "target_session_attrs", TARGET_SESSION_ATTRS)
    for name in ("ssl_min_protocol_version", "ssl_max_protocol_version"):
        _check_choice(params, name, tuple(TLS_VERSIONS))
    if "port" in params:
        ports = params["port"].split(",")
        if not all(p.isdigit() for p in ports if p):
            raise DatabaseUrlError(f"the database URL's port is not a number: {params['port']}")
        hosts = params.get("host", "localhost").split(",")
        if len(ports) not in (1, len(hosts)):
            raise DatabaseUrlError("the database URL names more ports than hosts (or fewer)")
    if "connect_timeout" in params:
        try:
            float(params["connect_timeout"])
        except ValueError:
            raise DatabaseUrlError(
                f"the database URL's connect_timeout is not a number: {params['connect_timeout']}"
            ) from None
    return DatabaseUrl(params=params, _ssl=ssl_for(params))


def ssl_for(params: Mapping[str, str]) -> ssl.SSLContext | str | bool | None:
    """asyncpg's ``ssl`` argument for libpq's ``sslmode`` and certificate parameters.

    ``disable``: no TLS. No sslmode, ``allow`` or ``prefer``: asyncpg's own opportunistic modes
    (as libpq: TLS when the server offers it, unverified). ``require``: TLS, the certificate
    verified against ``sslrootcert`` only when one is given (libpq's rule). ``verify-ca``: signed
    by ``sslrootcert`` (``system``: the system's CAs). ``verify-full``: and issued for the host.
    """
    mode = params.get("sslmode")
    has_cert = bool(params.get("sslcert") or params.get("sslkey"))
    if mode == "disable":
        return False
    if mode in (None, "allow", "prefer"):
        if has_cert or params.get("sslrootcert"):
            raise DatabaseUrlError(
                "the database URL gives certificates (sslcert/sslkey/sslrootcert) but "
                f"sslmode={mode or 'prefer'}: use sslmode=require, verify-ca or verify-full"
            )
        return mode or None
    root = params.get("sslrootcert")
    verify = mode in ("verify-ca", "verify-full") or bool(root)
    if verify and not root:
        raise DatabaseUrlError(
            f"sslmode={mode} needs sslrootcert (the CA's certificate file, or sslrootcert=system "
            "for the system's CAs) in the database URL"
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = mode == "verify-full" or (root == "system" and mode != "verify-ca")
    ctx.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    try:
        if root == "system":
            ctx.load_default_certs()
        elif root:
            ctx.load_verify_locations(cafile=_readable(root, "sslrootcert"))
        if params.get("sslcrl"):
            ctx.load_verify_locations(cafile=_readable(params["sslcrl"], "sslcrl"))
            ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
        if has_cert:
            if not params.get("sslcert") or not params.get("sslkey"):
                raise DatabaseUrlError("the database URL gives only one of sslcert and sslkey")
            ctx.load_cert_chain(
                _readable(params["sslcert"], "sslcert"),
                _readable(params["sslkey"], "sslkey"),
                password=params.get("sslpassword") or None,
            )
    except ssl.SSLError as exc:
        raise DatabaseUrlError(
            f"the database URL's certificates could not be loaded: {_one_line(exc)}"
        ) from None
    for name, attr in (
        ("ssl_min_protocol_version", "minimum_version"),
        ("ssl_max_protocol_version", "maximum_version"),
    ):
        if params.get(name):
            setattr(ctx, attr, ssl.TLSVersion[TLS_VERSIONS[params[name]]])
    return ctx


def _readable(path: str, name: str) -> str:
    if not Path(path).expanduser().is_file():
        raise DatabaseUrlError(f"the database URL's {name} file {path} does not exist")
    return str(Path(path).expanduser())


def _check_choice(params: Mapping[str, str], name: str, choices: tuple[str, ...]) -> None:
    if name in params and params[name] not in choices:
        raise DatabaseUrlError(
            f"the database URL's {name}={params[name]} is not one of {', '.join(choices)}"
        )


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def sqlalchemy_url(url: str) -> str:
    """The dialect URL (see ``DatabaseUrl.sqlalchemy_url``)."""
    return parse(url).sqlalchemy_url()


def libpq_url(url: str) -> str:
    """``url`` as libpq takes it (``postgresql://``, no ``+driver``), after checking it."""
    parse(url)
    return _normalized(url)


def _normalized(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if sep and scheme.split("+")[0].lower() in ("postgresql", "postgres"):
        return f"postgresql://{rest}"
    return url


#: Parameters whose value is a secret (masked in ``python -m app settings`` and in logs).
SECRET_PARAMS = ("password", "sslpassword")


def secrets_in(url: str) -> list[str]:
    """The secret values in ``url`` (its password, the client key's passphrase)."""
    try:
        params = parse(url).params
    except ValueError:  # refused at load already, with a clear message
        return []
    return [params[name] for name in SECRET_PARAMS if params.get(name)]


def redacted(url: str) -> str:
    """``url`` with every secret in it replaced by ``***`` (or ``****`` whole when it cannot be
    parsed: an unparsed URL is never echoed)."""
    try:
        parse(url)
    except ValueError:
        return "****"
    for secret in sorted(secrets_in(url), key=len, reverse=True):
        url = url.replace(quote(secret, safe=""), "***").replace(secret, "***")
    return url
