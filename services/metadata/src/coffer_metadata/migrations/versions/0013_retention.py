"""webhook deliveries and attempts: indexes by age, for retention (issue 49)

Revision ID: 0013_retention
Revises: 0012_cursors
Create Date: 2026-11-27 21:00:00.000000

The retention pass (coffer_metadata.retention) deletes the delivery log's oldest rows a batch at
a time; without an index by age each batch would read the whole log. Events (by
``ix_events_audit_pending``), finished tus uploads (``ix_tus_uploads_expires``) and auth's audit
entries (by ``created_at``) have theirs already.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0013_retention"
down_revision: str | None = "0012_cursors"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_webhook_attempts_created", "webhook_attempts", ["created_at"])
    op.create_index("ix_webhook_deliveries_created", "webhook_deliveries", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_created", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_attempts_created", table_name="webhook_attempts")
