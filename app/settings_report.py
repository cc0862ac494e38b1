"""``python -m app settings``: the effective settings as ``NAME=value`` lines, secrets masked.

What the process would run with (environment, then defaults), grouped as in ``app/config.py``,
under the names the documentation uses: ``DATABASE_URL``, and the standard ``AWS_*`` and
``OTEL_*`` variables the libraries read where a deprecated ``THREADKEEPER_*`` alias exists (its
value when it is still set, since it wins in this release; a comment names it). A value that is
a secret shows as ``****`` (set) or empty (unset), API keys keep their principal
(``alice:****``) and a database URL keeps everything but its password (``***``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import msgspec

from app.config import DEPRECATED, Settings, env_name
from app.db.urls import redacted

#: Documented names of settings whose ``THREADKEEPER_*`` name is not the one to use.
DOCUMENTED = {"THREADKEEPER_DATABASE_URL": "DATABASE_URL", **DEPRECATED}

MASK = "****"
#: Settings whose whole value is a secret.
SECRET = frozenset(
    {
        "llm_api_key",
        "web_search_api_key",
        "s3_secret_access_key",
        "stream_token_secret",
    }
)
#: Standard variables whose whole value is a secret.
SECRET_VARIABLES = frozenset({"AWS_SECRET_ACCESS_KEY"})


def _shown(name: str, value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if not text:
        return ""
    if name in SECRET:
        return MASK
    if name == "api_keys":
        principals = [pair.strip().partition(":")[0] for pair in text.split(",") if pair.strip()]
        return ",".join(f"{p}:{MASK}" for p in principals)
    if name in ("database_url", "database_direct_url"):
        return redacted(text)  # user:****@host, sslpassword=****
    return text


def report(settings: Settings, environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    lines: list[str] = []
    for group in msgspec.structs.fields(Settings):
        lines.append(f"# {group.name}")
        values = getattr(settings, group.name)
        for field in msgspec.structs.fields(group.type):
            name, value = env_name(field.name), getattr(values, field.name)
            documented = DOCUMENTED.get(name, name)
            if documented in DEPRECATED.values():
                if value:  # the deprecated alias is set, and wins in this release
                    lines.append(f"# {name} is deprecated: set {documented}")
                else:  # read by the library itself (obstore, the OpenTelemetry SDK)
                    value = env.get(documented, "")
                if documented in SECRET_VARIABLES and value:
                    value = MASK
            lines.append(f"{documented}={_shown(field.name, value)}")
    return "\n".join(lines) + "\n"
