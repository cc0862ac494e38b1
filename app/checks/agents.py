"""The agents file (the preflight ``serve`` runs: every model, tool and budget) and every MCP
server of every agent (started or reached, its tools listed, the budget checked with them)."""

from __future__ import annotations

from typing import Any

from app.checks.base import CheckContext, Report


async def check_agents(ctx: CheckContext, report: Report) -> None:
    from app.agents.assembly import preflight
    from app.agents.models import model_name
    from app.agents.spec import AgentsFileError, budget_of

    settings = ctx.settings
    assert settings is not None
    try:
        ctx.specs = preflight(settings)
    except AgentsFileError as exc:
        report.problem(str(exc))
        return
    source = settings.agent.agents_file or "no agents file: the built-in agent"
    for spec in ctx.specs:
        budget = budget_of(spec, settings)
        if spec.graph:
            report.ok(
                f"agent {spec.id!r} ({source}): graph {spec.graph} loads (a messages channel), "
                f"summary threshold {budget.summary_threshold} tokens"
            )
            continue
        report.ok(
            f"agent {spec.id!r} ({source}): model {model_name(spec.model, settings)}, summary "
            f"threshold {budget.summary_threshold} tokens (previews {budget.tool_result_preview_tokens}, "
            f"recent {budget.summary_keep_recent_tokens}, summary {budget.summary_max_tokens}): "
            "the budget can converge"
        )


async def check_mcp_servers(ctx: CheckContext, report: Report) -> None:
    """Assembled as ``serve`` assembles them (without a database): an agent whose server cannot
    be listed, or whose budget or approvals do not fit the tools it lists, is a problem."""
    from pathlib import Path

    from app.agents.assembly import build_registry
    from app.compression.workdir import Workdir

    settings, specs = ctx.settings, ctx.specs
    assert settings is not None and specs is not None
    with_mcp = [spec for spec in specs if spec.mcp_servers]
    if not with_mcp:
        report.ok("no agent uses an MCP server")
        return

    async def no_search(*, kb: str, owner_id: str, query: str, limit: int) -> dict[str, Any]:
        return {}

    agents_file = settings.agent.agents_file
    registry = await build_registry(
        with_mcp,
        settings,
        search_kb=no_search,
        workdir=Workdir(settings.workdir.workdir_path),  # never written: no tool runs
        checkpointer=None,
        base_dir=Path(agents_file).parent if agents_file else None,
        hold_mcp_sessions=False,
    )
    try:
        for spec in with_mcp:
            info = registry.info(spec.id)
            assert info is not None
            if not info.available:
                report.problem(f"agent {spec.id!r}: {info.unavailable_reason}")
                continue
            for server in registry.mcp_servers:
                if server.agent_id == spec.id:
                    names = ", ".join(server.tool_names) or "none"
                    report.ok(
                        f"agent {spec.id!r}: MCP server {server.name!r} lists "
                        f"{len(server.tool_names)} tool(s): {names}"
                    )
    finally:
        await registry.close()
