"""drop conversations.archived: nothing ever set it (every query only filtered on false)

Revision ID: 0006_i18
Revises: 0005_i22
Create Date: 2026-12-03 18:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_i18"
down_revision: str | None = "0005_i22"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_column("conversations", "archived")


def downgrade() -> None:
    op.add_column(
        "conversations",
        sa.Column("archived", sa.Boolean(), server_default=sa.text("false"), nullable=False),
    )
