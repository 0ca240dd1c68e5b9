"""assets.visibility (CONTRACT §12: private assets)

Revision ID: 0004_asset_visibility
Revises: 0003
Create Date: 2026-11-24 22:10:00.000000

A plain ``ADD COLUMN`` with a server default on both databases: existing assets are public,
as they were. SQLite does not rebuild the table for it, so the rowids the name-search index
(0003) is keyed by stay as they are. The ``visibility`` filter of ``GET /api/assets`` has
an index of its own, (organization, visibility, created, id), so its page (newest first) and
its count read the index, not every asset of the organization.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_asset_visibility"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "assets", sa.Column("visibility", sa.String(length=16), nullable=False, server_default="public")
    )
    op.create_index(
        "ix_assets_org_visibility_created", "assets", ["organization_id", "visibility", "created_at", "id"]
    )


def downgrade() -> None:
    op.drop_index("ix_assets_org_visibility_created", table_name="assets")
    # Not batch_alter_table: on SQLite that copies the table and renumbers the rowids the name
    # search index (0003) is keyed by. DROP COLUMN needs SQLite 3.35 (2021).
    op.drop_column("assets", "visibility")
