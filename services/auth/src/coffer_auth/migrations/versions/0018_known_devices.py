"""known_devices: the browsers each user signed in from, for the sign-in throttle

Revision ID: 0018_known_devices
Revises: 0017_grant_revocations
Create Date: 2026-11-29 22:00:00.000000

Failures from browsers an account does not know count for the account as a whole as well as
for their network, so a guesser spread over many networks waits; a known browser (a device
token from an earlier sign-in, only its SHA-256 kept here) counts only its own
(``coffer_auth.devices``).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018_known_devices"
down_revision: str | None = "0017_grant_revocations"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "known_devices",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("token_hash"),
    )
    op.create_index("ix_known_devices_user_id", "known_devices", ["user_id"])


def downgrade() -> None:
    op.drop_index("ix_known_devices_user_id", table_name="known_devices")
    op.drop_table("known_devices")
