"""organizations.trash_retention_days (issue 47, the trash)

Revision ID: 0011_trash
Revises: 0010_key_scopes
Create Date: 2026-11-27 21:00:00.000000

A plain ``ADD COLUMN`` on both databases: every organization keeps today's final deletes (0)
until an owner or the operator gives it a retention.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_trash"
down_revision: str | None = "0010_key_scopes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "organizations",
        sa.Column("trash_retention_days", sa.Integer(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    with op.batch_alter_table("organizations") as batch:
        batch.drop_column("trash_retention_days")
