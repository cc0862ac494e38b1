"""The database: it answers, and its schema is at the Alembic head (or how far behind it is)."""

from __future__ import annotations

from app.checks.base import CheckContext, Report, one_line
from app.db.preflight import database_problem, describe


async def check_database(ctx: CheckContext, report: Report) -> None:
    assert ctx.settings is not None
    db = ctx.settings.database
    if not db.database_url:
        report.warning(
            "no DATABASE_URL: serve would start the embedded PostgreSQL in "
            f"{db.embedded_pg_dir} (a development database; set DATABASE_URL to deploy)"
        )
        return
    problem = await database_problem(db.database_url, db.db_startup_timeout_seconds)
    if problem is not None:
        report.problem(problem)
        return
    ctx.database_answered = True
    try:
        behind, applied, heads = await schema_position(
            db.database_url, transaction_pooler=db.transaction_pooler
        )
    except Exception as exc:
        report.problem(
            f"the database at {describe(db.database_url)} answers, but its schema "
            f"could not be read: {one_line(exc)}"
        )
        return
    where = describe(db.database_url)
    if behind == 0:
        report.ok(f"{where} answers; the schema is at the head ({', '.join(sorted(heads))})")
    elif not applied:
        report.problem(
            f"{where} answers, but it is not migrated ({behind} revisions to apply): "
            "run python -m app migrate"
        )
    elif behind is None:
        report.problem(
            f"{where} is at {', '.join(sorted(applied))}, which this version does "
            f"not know (head {', '.join(sorted(heads))}): a newer version migrated it?"
        )
    else:
        report.problem(
            f"{where} is {behind} revision(s) behind the head (at "
            f"{', '.join(sorted(applied))}, head {', '.join(sorted(heads))}): "
            "run python -m app migrate"
        )


async def schema_position(
    url: str, *, transaction_pooler: bool = False
) -> tuple[int | None, frozenset[str], frozenset[str]]:
    """(revisions from the applied ones to the head, None when an applied one is unknown
    here; the applied revisions; the heads)."""
    from alembic.script import ScriptDirectory
    from alembic.util.exc import CommandError

    from app.db.migrate import alembic_config, applied_revisions, head_revisions
    from app.db.session import create_engine

    engine = create_engine(
        url, pool_size=1, timeout_seconds=5, transaction_pooler=transaction_pooler
    )
    try:
        applied = await applied_revisions(engine)
    finally:
        await engine.dispose()
    heads = head_revisions()
    script = ScriptDirectory.from_config(alembic_config(""))
    try:
        pending = {
            rev.revision
            for head in heads
            for rev in script.iterate_revisions(head, tuple(applied) or "base")
        }
    except CommandError:
        return None, applied, heads
    return len(pending - applied), applied, heads
