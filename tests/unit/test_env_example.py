""".env.example is the settings reference: checked against app/config.py in both directions."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from app.config import DEPRECATED, GROUP_OF, Settings, env_name
from app.telemetry import ENDPOINT_VARIABLES

ENV_EXAMPLE = Path(__file__).parents[2] / ".env.example"
#: ``# NAME=value`` (optionally followed, after two or more spaces, by a ``# comment``).
_LINE = re.compile(r"^#? ?([A-Z][A-Z0-9_]*)=(.*)$")
#: Variables the app reads that are not ``THREADKEEPER_*``: libraries read most of them.
STANDARD = {"DATABASE_URL", *DEPRECATED.values(), *ENDPOINT_VARIABLES}


def documented(text: str) -> dict[str, tuple[str, bool]]:
    """NAME -> (documented value, whether it is an example rather than the default)."""
    found: dict[str, tuple[str, bool]] = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        value, _, comment = (match.group(2) + "  ").partition("  ")
        found[match.group(1)] = (value.strip(), comment.lstrip().startswith("# example"))
    return found


def defaults() -> dict[str, object]:
    """THREADKEEPER_* name -> the code's default, read from the settings groups."""
    out: dict[str, object] = {}
    for group in msgspec.structs.fields(Settings):
        for field in msgspec.structs.fields(group.type):
            out[env_name(field.name)] = (field.type, field.default)
    return out


def check(text: str) -> list[str]:
    problems: list[str] = []
    docs = documented(text)
    code = defaults()
    for name in sorted(docs.keys() - code.keys() - STANDARD):
        problems.append(f"{name} is documented but no setting reads it")
    for name in sorted(code.keys() - docs.keys()):
        problems.append(f"{name} is a setting but .env.example does not document it")
    for name in sorted(docs.keys() & code.keys()):
        value, example = docs[name]
        kind, default = code[name]  # type: ignore[misc]
        if example:
            continue
        try:
            parsed = msgspec.convert(value, kind, strict=False)
        except msgspec.ValidationError:
            parsed = value
        if parsed != default:
            problems.append(
                f"{name}: .env.example says {value!r}, the code's default is {default!r}"
            )
    return problems


def test_env_example_matches_the_settings() -> None:
    assert check(ENV_EXAMPLE.read_text(encoding="utf-8")) == []


def test_the_check_catches_drift() -> None:
    """The check itself: a wrong default, an unknown name and a missing setting are named."""
    text = ENV_EXAMPLE.read_text(encoding="utf-8")
    drifted = text.replace("THREADKEEPER_DB_POOL_SIZE=40", "THREADKEEPER_DB_POOL_SIZE=20")
    drifted = drifted.replace("# THREADKEEPER_LOCK_TIMEOUT_MS=5000\n", "")
    drifted += "# THREADKEEPER_KB_DEFAULT=default\n"
    assert check(drifted) == [
        "THREADKEEPER_KB_DEFAULT is documented but no setting reads it",
        "THREADKEEPER_LOCK_TIMEOUT_MS is a setting but .env.example does not document it",
        "THREADKEEPER_DB_POOL_SIZE: .env.example says '20', the code's default is 40",
    ]


def test_every_setting_name_is_unique_across_groups() -> None:
    """One name, one group: the flat environment name must find exactly one field."""
    names = [
        field.name
        for group in msgspec.structs.fields(Settings)
        for field in msgspec.structs.fields(group.type)
    ]
    assert len(names) == len(set(names)) == len(GROUP_OF)
