"""assets: detected media type and malware scan state (issue 48, "Safe ingest")

Revision ID: 0010_safe_ingest
Revises: 0009_tus_minters
Create Date: 2026-11-27 17:45:00.000000

Plain ``ADD COLUMN``s, nullable or with a server default, on both databases: existing assets
have no detected type and no scan (``scan_status`` null), as before. SQLite does not rebuild
the table for them, so the rowids the name-search index (0003) is keyed by stay as they are.
The scan queue is the assets whose ``scan_due_at`` is set (pending, due at that time): a
partial index holds them alone, so finding due scans never reads the other assets.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_safe_ingest"
down_revision: str | None = "0009_tus_minters"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("assets", sa.Column("detected_type", sa.String(length=255), nullable=True))
    op.add_column("assets", sa.Column("scan_status", sa.String(length=16), nullable=True))
    op.add_column("assets", sa.Column("scan_signature", sa.String(length=255), nullable=True))
    op.add_column("assets", sa.Column("scan_attempts", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("assets", sa.Column("scan_due_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_assets_scan_due",
        "assets",
        ["scan_due_at"],
        postgresql_where=sa.text("scan_due_at IS NOT NULL"),
        sqlite_where=sa.text("scan_due_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_assets_scan_due", table_name="assets")
    # Not batch_alter_table: on SQLite that copies the table and renumbers the rowids the name
    # search index (0003) is keyed by. DROP COLUMN needs SQLite 3.35 (2021).
    for column in ("scan_due_at", "scan_attempts", "scan_signature", "scan_status", "detected_type"):
        op.drop_column("assets", column)
