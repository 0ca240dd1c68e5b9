"""grant_revocations: the authorities that stopped acting, until edge has relayed them to blob

Revision ID: 0017_grant_revocations
Revises: 0016_token_sessions
Create Date: 2026-11-29 21:30:00.000000

Signed URLs die with the authority they were made under (``key:<id>``, ``user:<id>``). A key
deleted or a member removed queues that authority, per organization, in the same transaction
(``coffer_auth.grants``); edge relays the queue to blob and acknowledges it. AUTOINCREMENT on
SQLite: an acknowledged seq is never handed out again.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017_grant_revocations"
down_revision: str | None = "0016_token_sessions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "grant_revocations",
        sa.Column("seq", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("authority", sa.String(length=80), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("seq"),
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    op.drop_table("grant_revocations")
