"""index agent_runs.request_id (foreign key) and agent_runs.finished_at (run-event prune)

Without the first, every deleted agent_run_requests row (DeleteThread cascades them) made
PostgreSQL's foreign-key check scan all of agent_runs, and GetRequest's run lookup did too: a
thread with 1,000 runs among 300,000 took 26 s to delete, holding the thread lock.

Revision ID: 0005_i22
Revises: 0004_i14api
Create Date: 2026-12-03 18:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005_i22"
down_revision: str | None = "0004_i14api"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_agent_runs_request_id", "agent_runs", ["request_id"])
    op.create_index("ix_agent_runs_finished_at", "agent_runs", ["finished_at"])


def downgrade() -> None:
    op.drop_index("ix_agent_runs_finished_at", table_name="agent_runs")
    op.drop_index("ix_agent_runs_request_id", table_name="agent_runs")
