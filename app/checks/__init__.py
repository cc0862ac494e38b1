"""``python -m app check``: everything an operator can verify before deploying, one line per
finding, exit 2 when anything is wrong and 0 when all is well, never a traceback.

The sections run in order, each a named ``Check`` (``app/checks/*.py``); later ones use what
earlier ones found (the settings, the agents) and are skipped when that is missing. To add a
section: write ``async def run(ctx: CheckContext, report: Report)`` in a module of its own and
list it in ``CHECKS`` below.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TextIO

from app.checks.agents import check_agents, check_mcp_servers
from app.checks.base import Check, CheckContext, Report, one_line
from app.checks.connections import check_connections
from app.checks.database import check_database
from app.checks.providers import PROVIDERS_HINT, check_providers
from app.checks.settings import check_settings

__all__ = ["CHECKS", "Check", "CheckContext", "Report", "run_checks"]

CHECKS: list[Check] = [
    Check("settings", check_settings),
    Check("agents", check_agents, needs=("settings",)),
    Check("database", check_database, needs=("settings",)),
    Check("connections", check_connections, needs=("settings",)),
    Check("mcp", check_mcp_servers, needs=("settings", "specs")),
    Check(
        "providers",
        check_providers,
        needs=("settings", "specs"),
        option="providers",
        skipped_hint=PROVIDERS_HINT,
    ),
]


async def run_checks(ctx: CheckContext, out: TextIO = sys.stdout) -> int:
    """Every section in order, its lines printed as ``<level> <section>: <text>``; 2 when any
    line is a problem, else 0."""
    failed = False
    for check in CHECKS:
        report = Report(check.name)
        missing = [need for need in check.needs if getattr(ctx, need) is None]
        if check.option is not None and not getattr(ctx, check.option):
            report.skipped(check.skipped_hint or f"run with --{check.option}")
        elif missing:
            report.skipped(f"needs the {missing[0]}, which could not be read (see above)")
        else:
            try:
                await check.run(ctx, report)
            except Exception as exc:  # a section's own failure is a finding, never a traceback
                report.problem(f"the check could not run: {one_line(exc)}")
        for level, text in report.lines:
            out.write(f"{level:<8}{check.name}: {text}\n")
        out.flush()
        failed = failed or report.failed
    return 2 if failed else 0


def context(environ: Mapping[str, str], *, providers: bool = False) -> CheckContext:
    return CheckContext(environ=environ, providers=providers)
