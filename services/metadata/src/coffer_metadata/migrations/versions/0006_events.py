"""events: the outbox of changes to folders and assets (issue 23's audit, issue 25's webhooks)

Revision ID: 0006_events
Revises: 0005_intent_reservations
Create Date: 2026-11-25 03:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_events"
down_revision: str | None = "0005_intent_reservations"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("id", sa.String(length=40), primary_key=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.Column("changes", sa.Text(), nullable=True),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("audited", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.create_index("ix_events_audit_pending", "events", ["audited", "created_at"])
    op.create_index("ix_events_org_created", "events", ["organization_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_events_org_created", table_name="events")
    op.drop_index("ix_events_audit_pending", table_name="events")
    op.drop_table("events")
