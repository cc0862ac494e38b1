"""``python -m app settings``: the effective settings as ``NAME=value`` lines, secrets masked.

What the process would run with (environment, then defaults), grouped as in ``app/config.py``;
a value that is a secret shows as ``****`` (set) or empty (unset), API keys keep their
principal (``alice:****``) and a database URL keeps everything but its password (``***``).
"""

from __future__ import annotations

import msgspec
from sqlalchemy.engine import make_url

from app.config import Settings, env_name

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
    if name == "database_url":
        try:
            parsed = make_url(text)
        except Exception:  # refused at load already; never echo an unparsed URL
            return MASK
        return parsed.render_as_string(hide_password=True)  # user:***@host
    return text


def report(settings: Settings) -> str:
    lines: list[str] = []
    for group in msgspec.structs.fields(Settings):
        lines.append(f"# {group.name}")
        values = getattr(settings, group.name)
        for field in msgspec.structs.fields(group.type):
            lines.append(
                f"{env_name(field.name)}={_shown(field.name, getattr(values, field.name))}"
            )
    return "\n".join(lines) + "\n"
