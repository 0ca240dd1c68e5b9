"""folders: a default expiry for the assets uploaded into them (issue 47)

Revision ID: 0015_folder_expiry
Revises: 0014_asset_metadata
Create Date: 2026-11-27 22:10:00.000000

``folders.expiry_days``: nullable integer (1–3650, checked by the API; NULL = no default).
A plain ``ADD COLUMN`` without a default on both databases: no table rewrite, no copy.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_folder_expiry"
down_revision: str | None = "0014_asset_metadata"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("folders", sa.Column("expiry_days", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("folders") as batch:
        batch.drop_column("expiry_days")
