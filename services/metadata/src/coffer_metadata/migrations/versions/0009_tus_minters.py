"""tus_uploads: the key (or dashboard user) that minted an upload's token (its capability dies
with it), and an index for an organization's open uploads

Revision ID: 0009_tus_minters
Revises: 0008_webhooks
Create Date: 2026-11-27 17:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_tus_minters"
down_revision: str | None = "0008_webhooks"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tus_uploads") as batch:
        batch.add_column(sa.Column("minter_key_id", sa.String(length=40), nullable=True))
        batch.add_column(sa.Column("minter_user_id", sa.String(length=40), nullable=True))
    op.create_index("ix_tus_uploads_org", "tus_uploads", ["organization_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_tus_uploads_org", table_name="tus_uploads")
    with op.batch_alter_table("tus_uploads") as batch:
        batch.drop_column("minter_user_id")
        batch.drop_column("minter_key_id")
