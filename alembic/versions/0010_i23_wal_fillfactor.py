"""conversations, agent_runs: ``fillfactor`` 80, so their per-step updates stay HOT

Every graph step updates its thread's row (``next_message_seq``, ``updated_at``) and its run's
(token usage); none of those columns is indexed, so each update can be HOT (heap-only: no new
entry in any index) when the row's page has room. At the default fillfactor 100, pages fill with
new rows and a share of updates go non-HOT, writing an entry in each index (the GIN metadata
index of conversations, five on agent_runs). Measured (2,000 threads, 4,000 step updates over
64 active ones): non-HOT 43-299 -> 0-27 updates, WAL per update 165-187 -> 156-158 B. Only pages
written from now on keep the room (no rewrite here); ``VACUUM FULL`` applies it to old ones.

Revision ID: 0010_i23_wal_fillfactor
Revises: 0009_i23_wal_run_events
Create Date: 2026-12-04 11:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010_i23_wal_fillfactor"
down_revision: str | None = "0009_i23_wal_run_events"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("conversations", "agent_runs")


def upgrade() -> None:
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} SET (fillfactor = 80)")


def downgrade() -> None:
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} RESET (fillfactor)")
