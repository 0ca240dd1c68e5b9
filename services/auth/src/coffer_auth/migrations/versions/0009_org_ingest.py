"""organizations: ingest mode, allowed media types, malware scanning (issue 48, "Safe ingest")

Revision ID: 0009_org_ingest
Revises: 0008_upload_token_users
Create Date: 2026-11-27 17:50:00.000000

Plain ``ADD COLUMN``s on both databases: every organization keeps today's behaviour
(``record``, any type, no scanning) until an owner or the operator changes it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_org_ingest"
down_revision: str | None = "0008_upload_token_users"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "organizations",
        sa.Column("ingest_mode", sa.String(length=16), nullable=False, server_default="record"),
    )
    op.add_column("organizations", sa.Column("allowed_types", sa.Text(), nullable=True))
    op.add_column(
        "organizations", sa.Column("scan_mode", sa.String(length=16), nullable=False, server_default="off")
    )


def downgrade() -> None:
    with op.batch_alter_table("organizations") as batch:
        batch.drop_column("scan_mode")
        batch.drop_column("allowed_types")
        batch.drop_column("ingest_mode")
