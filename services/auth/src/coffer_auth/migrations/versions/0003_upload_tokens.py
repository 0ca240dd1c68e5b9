"""upload tokens

Revision ID: 0003
Revises: 0001
Create Date: 2026-11-23 18:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
# After 0002 (dashboard accounts, sessions, invitations, audit).
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "upload_tokens",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("key_id", sa.String(length=40), nullable=True),
        sa.Column("folder_id", sa.String(length=40), nullable=True),
        sa.Column("name", sa.String(length=1024), nullable=True),
        sa.Column("max_bytes", sa.BigInteger(), nullable=False),
        sa.Column("content_types", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("asset_id", sa.String(length=40), nullable=True),
        sa.ForeignKeyConstraint(["organization_id"], ["organizations.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    with op.batch_alter_table("upload_tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_upload_tokens_expires_at"), ["expires_at"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_upload_tokens_organization_id"), ["organization_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("upload_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_upload_tokens_organization_id"))
        batch_op.drop_index(batch_op.f("ix_upload_tokens_expires_at"))
    op.drop_table("upload_tokens")
