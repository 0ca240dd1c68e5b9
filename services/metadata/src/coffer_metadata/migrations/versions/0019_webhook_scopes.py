"""webhook endpoints and deliveries: the scope a delivery was planned under

Revision ID: 0019_webhook_scopes
Revises: 0018_scan_holds
Create Date: 2026-11-29 16:00:00.000000

An endpoint's ``scope`` goes up by one each time its folder filter changes, and each delivery
keeps the scope it was fanned out under: a subtree key lists only the deliveries of the
endpoint's current scope, never those it sent when it heard more of the organization. The
endpoints that exist start at 1 and their deliveries at 0: a subtree key sees none of what an
endpoint sent before this migration (their filters' history is unknown), the organization's
own keys all of it. The deliveries' column has a default, so no row of that table is rewritten.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019_webhook_scopes"
down_revision: str | None = "0018_scan_holds"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for table in ("webhook_endpoints", "webhook_deliveries"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("scope", sa.Integer(), nullable=False, server_default="0"))
    op.execute("UPDATE webhook_endpoints SET scope = 1")


def downgrade() -> None:
    for table in ("webhook_deliveries", "webhook_endpoints"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("scope")
