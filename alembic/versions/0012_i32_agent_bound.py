"""conversations.agent_bound: whether the thread's agent was chosen

A thread's agent lives only in ``conversations.agent_id``. It is chosen when the thread is
created (/v1's CreateThread, or LangGraph's ``threads.create`` with a ``graph_id``) or, for a
LangGraph thread created without one, by its first run; from then on it is fixed (a run naming
another assistant is refused). Every existing thread had its agent chosen.

Revision ID: 0012_i32_agent_bound
Revises: 0011_i34_provider_fields
Create Date: 2026-12-05 07:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_i32_agent_bound"
down_revision: str | None = "0011_i34_provider_fields"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "conversations",
        sa.Column("agent_bound", sa.Boolean(), nullable=False, server_default=sa.text("true")),
    )


def downgrade() -> None:
    op.drop_column("conversations", "agent_bound")
