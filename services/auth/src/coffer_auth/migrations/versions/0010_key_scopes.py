"""api_keys.scopes, folder_id, networks: least-privilege keys (issue 46). Every existing key
is ``full``, what a key could do before.

Revision ID: 0010_key_scopes
Revises: 0009_org_ingest
Create Date: 2026-11-27 17:45:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_key_scopes"
down_revision: str | None = "0009_org_ingest"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("scopes", sa.String(length=512), nullable=False, server_default="full"))
        batch.add_column(sa.Column("folder_id", sa.String(length=40), nullable=True))
        batch.add_column(sa.Column("networks", sa.String(length=1200), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("networks")
        batch.drop_column("folder_id")
        batch.drop_column("scopes")
