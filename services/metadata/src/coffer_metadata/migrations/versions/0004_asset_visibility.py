"""assets.visibility (CONTRACT §12: private assets)

Revision ID: 0004_asset_visibility
Revises: 0003
Create Date: 2026-11-24 22:10:00.000000

A plain ``ADD COLUMN`` with a server default on both databases: existing assets are public,
as they were. SQLite does not rebuild the table for it, so the rowids the name-search index
(0003) is keyed by stay as they are. The ``visibility`` filter of ``GET /api/assets`` is
served by the organization's listing indexes (a private asset is one row among them; no
index of its own: a two-valued column narrows too little to be worth one on every write).
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


def downgrade() -> None:
    with op.batch_alter_table("assets") as batch:
        batch.drop_column("visibility")
