"""organizations.scan_sync_due_at, scan_sync_generation (issue 48): a scan mode's change holds
or releases the files stored before it

Revision ID: 0013_scan_sync
Revises: 0012_token_asset
Create Date: 2026-11-29 07:00:00.000000

Plain ``ADD COLUMN``s on both databases (no organization has a sync due), and an index of when
one is due.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_scan_sync"
down_revision: str | None = "0012_token_asset"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("organizations", sa.Column("scan_sync_due_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column(
        "organizations",
        sa.Column("scan_sync_generation", sa.Integer(), nullable=False, server_default="0"),
    )
    op.create_index("ix_organizations_scan_sync_due_at", "organizations", ["scan_sync_due_at"])


def downgrade() -> None:
    op.drop_index("ix_organizations_scan_sync_due_at", table_name="organizations")
    with op.batch_alter_table("organizations") as batch:
        batch.drop_column("scan_sync_generation")
        batch.drop_column("scan_sync_due_at")
