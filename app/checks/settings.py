"""The settings: they load (every value valid), no ``THREADKEEPER_*`` variable is a typo, no
deprecated name is left."""

from __future__ import annotations

import difflib

from app.checks.base import CheckContext, Report
from app.config import (
    DEPRECATED,
    GROUP_OF,
    deprecated_settings,
    env_name,
    load_settings,
    unknown_settings,
)


async def check_settings(ctx: CheckContext, report: Report) -> None:
    try:
        ctx.settings = load_settings(ctx.environ)
    except ValueError as exc:
        report.problem(" ".join(str(exc).split()))
    known = sorted(env_name(name) for name in GROUP_OF if env_name(name) not in DEPRECATED)
    for name in unknown_settings(ctx.environ):
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
        hint = f"; did you mean {close[0]}?" if close else ""
        report.problem(f"{name} is set, but no setting reads it (the default applies){hint}")
    for old, new in deprecated_settings(ctx.environ).items():
        report.warning(f"{old} is deprecated (it works in this release, not the next): set {new}")
    if not report.failed:
        report.ok(
            f"every value is valid; `python -m app settings` prints the {len(known)} settings"
        )
