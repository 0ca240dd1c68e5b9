"""the trash and asset expiry (issue 47)

Revision ID: 0011_trash
Revises: 0010_safe_ingest
Create Date: 2026-11-27 21:00:00.000000

``assets.expires_at`` (nullable, with a partial index of the assets that have one), the usage
row's trash counters (default 0), and ``trashed_assets``, where a deleted asset's row waits
while its organization keeps a trash. Plain ``ADD COLUMN``s: SQLite does not rebuild
``assets``, so the rowids the name-search index (0003) is keyed by stay as they are.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_trash"
down_revision: str | None = "0010_safe_ingest"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("assets", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_assets_expires",
        "assets",
        ["expires_at"],
        postgresql_where=sa.text("expires_at IS NOT NULL"),
        sqlite_where=sa.text("expires_at IS NOT NULL"),
    )
    op.add_column("usage", sa.Column("trashed_bytes", sa.BigInteger(), nullable=False, server_default="0"))
    op.add_column("usage", sa.Column("trashed_count", sa.BigInteger(), nullable=False, server_default="0"))
    op.create_table(
        "trashed_assets",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("folder_id", sa.String(length=40), nullable=True),
        sa.Column("key", sa.String(length=2048), nullable=False),
        sa.Column("name", sa.String(length=1024), nullable=False),
        sa.Column("mime_type", sa.String(length=255), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("name_key", sa.Text(), nullable=False),
        sa.Column("visibility", sa.String(length=16), nullable=False),
        sa.Column("detected_type", sa.String(length=255), nullable=True),
        sa.Column("scan_status", sa.String(length=16), nullable=True),
        sa.Column("scan_signature", sa.String(length=255), nullable=True),
        sa.Column("scan_attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("scan_due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("trashed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("purge_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("trashed_by", sa.Text(), nullable=False),
        sa.Column("trashed_by_user", sa.String(length=64), nullable=True),
        sa.Column("reason", sa.String(length=16), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key"),
    )
    op.create_index(
        "ix_trashed_assets_org_trashed", "trashed_assets", ["organization_id", "trashed_at", "id"]
    )
    op.create_index("ix_trashed_assets_purge", "trashed_assets", ["purge_at"])


def downgrade() -> None:
    op.drop_index("ix_trashed_assets_purge", table_name="trashed_assets")
    op.drop_index("ix_trashed_assets_org_trashed", table_name="trashed_assets")
    op.drop_table("trashed_assets")
    op.drop_column("usage", "trashed_count")
    op.drop_column("usage", "trashed_bytes")
    op.drop_index("ix_assets_expires", table_name="assets")
    op.drop_column("assets", "expires_at")
