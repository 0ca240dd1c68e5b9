"""tus_uploads: resumable uploads (CONTRACT §9); intents of resumable uploads expire

Revision ID: 0007_tus_uploads
Revises: 0006_events
Create Date: 2026-11-25 05:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_tus_uploads"
down_revision: str | None = "0006_events"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("upload_intents") as batch:
        batch.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "tus_uploads",
        sa.Column("id", sa.String(length=40), primary_key=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("asset_id", sa.String(length=40), nullable=False, unique=True),
        sa.Column("key", sa.String(length=2048), nullable=False),
        sa.Column("name", sa.String(length=1024), nullable=False),
        sa.Column("folder_id", sa.String(length=40), nullable=True),
        sa.Column("mime_type", sa.String(length=255), nullable=False),
        sa.Column("visibility", sa.String(length=16), nullable=False),
        sa.Column("upload_metadata", sa.Text(), nullable=False),
        sa.Column("length", sa.BigInteger(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("resume", sa.Text(), nullable=True),
        sa.Column("capability_hash", sa.String(length=64), nullable=True),
        sa.Column("token_id", sa.String(length=40), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lock_token", sa.String(length=64), nullable=True),
        sa.Column("locked_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_kept", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("completed", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.create_index("ix_tus_uploads_expires", "tus_uploads", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_tus_uploads_expires", table_name="tus_uploads")
    op.drop_table("tus_uploads")
    with op.batch_alter_table("upload_intents") as batch:
        batch.drop_column("expires_at")
