"""run_events: primary key ``(run_id, id)``, the separate ``(run_id, id)`` index dropped

Every read of a run's events is by ``run_id`` (after a cursor ``id``), so the primary key can be
that index: one B-tree per inserted event instead of two (~0.4 KB of WAL per trivial turn,
issue 23 item 4). ``id`` stays unique by its sequence; the prune deletes by ``(run_id, id)``.

Revision ID: 0009_i23_wal_run_events
Revises: 0008_i23_wal
Create Date: 2026-12-04 10:50:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0009_i23_wal_run_events"
down_revision: str | None = "0008_i23_wal"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_constraint("pk_run_events", "run_events", type_="primary")
    op.create_primary_key("pk_run_events", "run_events", ["run_id", "id"])
    op.drop_index("ix_run_events_run_id_id", table_name="run_events")


def downgrade() -> None:
    op.create_index("ix_run_events_run_id_id", "run_events", ["run_id", "id"], unique=False)
    op.drop_constraint("pk_run_events", "run_events", type_="primary")
    op.create_primary_key("pk_run_events", "run_events", ["id"])
