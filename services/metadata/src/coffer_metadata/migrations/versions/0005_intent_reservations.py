"""upload_intents.reserved_bytes and an index by organization (issue 23: quota reserved at the intent)

Revision ID: 0005_intent_reservations
Revises: 0004_asset_visibility
Create Date: 2026-11-25 03:20:00.000000

Each new upload intent holds the most its upload can store against the organization's quota,
and an organization has a bounded number of uploads in flight: both are read from the
organization's live intents, hence the index. Intents from before the migration hold 0 bytes
(they commit against the quota as before).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_intent_reservations"
down_revision: str | None = "0004_asset_visibility"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "upload_intents", sa.Column("reserved_bytes", sa.BigInteger(), nullable=False, server_default="0")
    )
    op.create_index("ix_upload_intents_org", "upload_intents", ["organization_id"])


def downgrade() -> None:
    op.drop_index("ix_upload_intents_org", table_name="upload_intents")
    op.drop_column("upload_intents", "reserved_bytes")
