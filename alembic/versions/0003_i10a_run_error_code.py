"""agent_runs.error_code: a stable, machine-readable reason next to the sanitized error text

Revision ID: 0003_i10a
Revises: 0002
Create Date: 2026-12-03 07:30:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0003_i10a'
down_revision: str | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('agent_runs', sa.Column('error_code', sa.String(length=50), nullable=True))
    # Runs ended before this revision: name the outcomes whose text was already fixed.
    op.execute(
        "UPDATE agent_runs SET error_code = CASE "
        "WHEN error LIKE 'lease expired%' THEN 'lease_expired' "
        "WHEN error = 'worker stopped' THEN 'worker_stopped' "
        "WHEN error = 'cancelled by request' THEN 'cancelled' END "
        "WHERE error IS NOT NULL"
    )


def downgrade() -> None:
    op.drop_column('agent_runs', 'error_code')
