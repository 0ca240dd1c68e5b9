"""organizations.default_visibility and upload_tokens.visibility (CONTRACT §12)

Revision ID: 0004_org_default_visibility
Revises: 0003
Create Date: 2026-11-24 22:10:00.000000

Plain ``ADD COLUMN``s on both databases: every organization keeps uploading public assets
until an owner or the operator changes its default; existing tokens follow that default.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_org_default_visibility"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "organizations",
        sa.Column("default_visibility", sa.String(length=16), nullable=False, server_default="public"),
    )
    op.add_column("upload_tokens", sa.Column("visibility", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("upload_tokens") as batch:
        batch.drop_column("visibility")
    with op.batch_alter_table("organizations") as batch:
        batch.drop_column("default_visibility")
