"""upload_tokens.user_id: the dashboard user who minted a token (its uploads' capabilities
live only while that user is a member, issue 44)

Revision ID: 0008_upload_token_users
Revises: 0007_audit_source
Create Date: 2026-11-27 18:25:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_upload_token_users"
down_revision: str | None = "0007_audit_source"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("upload_tokens") as batch:
        batch.add_column(sa.Column("user_id", sa.String(length=40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("upload_tokens") as batch:
        batch.drop_column("user_id")
