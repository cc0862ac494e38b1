"""agent_runs.provider_status / provider_code: what the provider answered a failed run

The HTTP status (null: no answer, e.g. a refused connection) and the provider's own error code
(``invalid_api_key``, ``model_not_found``...), never its free text: a client tells a wrong key from
a wrong base URL without reading the server log.

Revision ID: 0011_i34_provider_fields
Revises: 0010_i23_wal_fillfactor
Create Date: 2026-12-04 17:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_i34_provider_fields"
down_revision: str | None = "0010_i23_wal_fillfactor"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("agent_runs", sa.Column("provider_status", sa.Integer(), nullable=True))
    op.add_column("agent_runs", sa.Column("provider_code", sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column("agent_runs", "provider_code")
    op.drop_column("agent_runs", "provider_status")
