"""upload_tokens.asset (issues 47 and 50): what a token fixes about the asset it makes

Revision ID: 0012_token_asset
Revises: 0011_trash
Create Date: 2026-11-28 00:20:00.000000

A nullable ``ADD COLUMN`` on both databases: the tokens already minted fix nothing more.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_token_asset"
down_revision: str | None = "0011_trash"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("upload_tokens", sa.Column("asset", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("upload_tokens") as batch:
        batch.drop_column("asset")
