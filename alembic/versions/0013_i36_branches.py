"""thread_branches, messages.branch_id, conversations.branch_id: a thread's chat as a tree

Issue 36: a run from an earlier checkpoint (Edit, Regenerate) forks the thread. Messages are
never rewritten: each carries the branch it was written on (NULL: the thread's first branch,
every message written before), and a branch names the branch it forked from and the last of
that branch's messages it keeps (``fork_seq``). A branch's chat is its own messages after its
ancestors' up to each fork point; ``conversations.branch_id`` is the current one (NULL: the
first).

Revision ID: 0013_i36_branches
Revises: 0012_i32_agent_bound
Create Date: 2026-12-05 08:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0013_i36_branches"
down_revision: str | None = "0012_i32_agent_bound"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "thread_branches",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column(
            "conversation_id",
            sa.Uuid(),
            sa.ForeignKey("conversations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("parent_id", postgresql.UUID(as_uuid=True), nullable=True),
        sa.Column("fork_seq", sa.BigInteger(), nullable=False),
        sa.Column("checkpoint_id", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("request_id", postgresql.UUID(as_uuid=True), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
    )
    op.create_index(
        "ix_thread_branches_conversation", "thread_branches", ["conversation_id", "created_at"]
    )
    op.add_column("messages", sa.Column("branch_id", postgresql.UUID(as_uuid=True)))
    op.add_column("conversations", sa.Column("branch_id", postgresql.UUID(as_uuid=True)))


def downgrade() -> None:
    op.drop_column("conversations", "branch_id")
    op.drop_column("messages", "branch_id")
    op.drop_index("ix_thread_branches_conversation", table_name="thread_branches")
    op.drop_table("thread_branches")
