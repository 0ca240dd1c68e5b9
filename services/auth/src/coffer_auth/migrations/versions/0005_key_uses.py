"""when each key last acted in each organization

Revision ID: 0005_key_uses
Revises: 0004_org_default_visibility
Create Date: 2026-11-24 22:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_key_uses"
down_revision: str | None = "0004_org_default_visibility"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "key_uses",
        sa.Column("key_id", sa.String(length=40), nullable=False),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["key_id"], ["api_keys.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["organization_id"], ["organizations.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("key_id", "organization_id"),
    )
    # What a key did before this table existed happened in the organization it was made in.
    op.execute(
        "INSERT INTO key_uses (key_id, organization_id, last_used_at) "
        "SELECT id, organization_id, last_used_at FROM api_keys WHERE last_used_at IS NOT NULL"
    )


def downgrade() -> None:
    op.drop_table("key_uses")
