"""audit_events.source_id: the metadata event an audit event records (issue 23: API actions
audited, relayed from metadata's outbox by edge)

Revision ID: 0007_audit_source
Revises: 0006_login_throttles
Create Date: 2026-11-25 03:45:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_audit_source"
down_revision: str | None = "0006_login_throttles"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("audit_events") as batch:
        batch.add_column(sa.Column("source_id", sa.String(length=40), nullable=True))
        batch.create_unique_constraint("uq_audit_events_source_id", ["source_id"])


def downgrade() -> None:
    with op.batch_alter_table("audit_events") as batch:
        batch.drop_constraint("uq_audit_events_source_id", type_="unique")
        batch.drop_column("source_id")
