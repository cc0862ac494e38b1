"""workdir_index: the thread's offloaded originals, indexed once when written

``search_workdir`` used to read, hash and scan every original of the thread on each call, and
every offload rewrote the whole ``index.jsonl``. One row per original (inserted, never updated)
with its terms as a GIN-indexed tsvector makes a search an index lookup plus reads of the
matched files only. Originals offloaded before this revision stay readable; their legacy
``index.jsonl`` is imported by ``Workdir.import_legacy_index`` (see README).

Revision ID: 0007_i23_recall
Revises: 0006_i18
Create Date: 2026-12-03 22:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007_i23_recall"
down_revision: str | None = "0006_i18"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "workdir_index",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("thread_key", sa.String(length=200), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("entry", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("tsv", postgresql.TSVECTOR(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workdir_index")),
        sa.UniqueConstraint("thread_key", "path", name="uq_workdir_index_thread_key_path"),
    )
    op.create_index(
        "ix_workdir_index_tsv", "workdir_index", ["tsv"], unique=False, postgresql_using="gin"
    )


def downgrade() -> None:
    op.drop_index("ix_workdir_index_tsv", table_name="workdir_index", postgresql_using="gin")
    op.drop_table("workdir_index")
