"""checkpoint tables: drop the redundant ``*_thread_id_idx`` indexes

LangGraph's saver migrations create ``checkpoints_thread_id_idx``,
``checkpoint_blobs_thread_id_idx`` and ``checkpoint_writes_thread_id_idx``, but each table's
primary key already leads with ``thread_id``, so they only cost writes: ~1.8 KB of WAL per trivial
turn at 10 turns, ~3 KB at 100 (issue 23 item 4). Threadkeeper's saver leaves them out of its
migrations (app/db/checkpointer.py ``MIGRATIONS``), so a fresh database never gets them even though
the saver's setup runs after Alembic; here they are dropped where an earlier version created them.
``IF EXISTS``: on a fresh database the checkpoint tables do not exist yet when this runs.

Revision ID: 0008_i23_wal
Revises: 0007_i23_recall
Create Date: 2026-12-04 10:40:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0008_i23_wal"
down_revision: str | None = "0007_i23_recall"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: index -> the table it is on (the saver's own definitions).
INDEXES = {
    "checkpoints_thread_id_idx": "checkpoints",
    "checkpoint_blobs_thread_id_idx": "checkpoint_blobs",
    "checkpoint_writes_thread_id_idx": "checkpoint_writes",
}


def upgrade() -> None:
    for index in INDEXES:
        op.execute(f"DROP INDEX IF EXISTS {index}")


def downgrade() -> None:
    # Older code's saver believes its migrations created these: put them back where the tables are.
    for index, table in INDEXES.items():
        op.execute(
            f"DO $$ BEGIN IF to_regclass('{table}') IS NOT NULL THEN "
            f"CREATE INDEX IF NOT EXISTS {index} ON {table} (thread_id); END IF; END $$"
        )
