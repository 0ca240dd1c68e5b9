"""webhooks: endpoints, deliveries and their attempts (CONTRACT §11); events carry their trace
and whether webhooks have taken them

Revision ID: 0008_webhooks
Revises: 0007_tus_uploads
Create Date: 2026-11-26 00:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_webhooks"
down_revision: str | None = "0007_tus_uploads"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("dispatched", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("trace", sa.String(length=255), nullable=True))
    # Events written before webhooks existed have no endpoint to go to.
    op.execute(sa.text("UPDATE events SET dispatched = :yes").bindparams(yes=True))
    op.create_index("ix_events_dispatch_pending", "events", ["dispatched", "created_at"])
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.String(length=40), primary_key=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("events", sa.Text(), nullable=False),
        sa.Column("folder_id", sa.String(length=40), nullable=True),
        sa.Column("description", sa.String(length=500), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("disabled_reason", sa.String(length=32), nullable=True),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("previous_secret", sa.Text(), nullable=True),
        sa.Column("previous_secret_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failing_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_webhook_endpoints_org", "webhook_endpoints", ["organization_id", "created_at"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(length=40), primary_key=True),
        sa.Column("endpoint_id", sa.String(length=40), nullable=False),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("event_id", sa.String(length=40), nullable=False),
        sa.Column("event_type", sa.String(length=32), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("trace", sa.String(length=255), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("retry_until", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lease_token", sa.String(length=64), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("endpoint_id", "event_id", name="uq_webhook_deliveries_event"),
    )
    op.create_index("ix_webhook_deliveries_due", "webhook_deliveries", ["status", "next_attempt_at"])
    op.create_index("ix_webhook_deliveries_lease", "webhook_deliveries", ["endpoint_id", "lease_until"])
    op.create_table(
        "webhook_attempts",
        sa.Column("id", sa.String(length=40), primary_key=True),
        sa.Column("delivery_id", sa.String(length=40), nullable=False),
        sa.Column("endpoint_id", sa.String(length=40), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("result", sa.String(length=16), nullable=False),
        sa.Column("response_status", sa.Integer(), nullable=True),
        sa.Column("error", sa.String(length=512), nullable=True),
        sa.Column("latency_ms", sa.Integer(), nullable=False),
        sa.Column("response", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_webhook_attempts_endpoint", "webhook_attempts", ["endpoint_id", "created_at"])
    op.create_index("ix_webhook_attempts_delivery", "webhook_attempts", ["delivery_id"])


def downgrade() -> None:
    op.drop_table("webhook_attempts")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_endpoints")
    op.drop_index("ix_events_dispatch_pending", table_name="events")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("trace")
        batch.drop_column("dispatched")
