"""thread metadata (GIN) and PostMessage idempotency keys

Revision ID: 0004_i14api
Revises: 0003_i10a
Create Date: 2026-12-03 07:30:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004_i14api"
down_revision: str | None = "0003_i10a"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "conversations",
        sa.Column(
            "metadata",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
    )
    op.create_index(
        "ix_conversations_metadata",
        "conversations",
        ["metadata"],
        postgresql_using="gin",
        postgresql_ops={"metadata": "jsonb_path_ops"},
    )
    op.add_column(
        "agent_run_requests", sa.Column("idempotency_key", sa.String(length=200), nullable=True)
    )
    op.add_column(
        "agent_run_requests",
        sa.Column("idempotency_fingerprint", sa.String(length=64), nullable=True),
    )
    op.create_index(
        "uq_requests_conversation_idempotency_key",
        "agent_run_requests",
        ["conversation_id", "idempotency_key"],
        unique=True,
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index(
        "uq_requests_conversation_idempotency_key",
        table_name="agent_run_requests",
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )
    op.drop_column("agent_run_requests", "idempotency_fingerprint")
    op.drop_column("agent_run_requests", "idempotency_key")
    op.drop_index(
        "ix_conversations_metadata",
        table_name="conversations",
        postgresql_using="gin",
        postgresql_ops={"metadata": "jsonb_path_ops"},
    )
    op.drop_column("conversations", "metadata")
