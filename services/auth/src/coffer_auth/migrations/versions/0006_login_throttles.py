"""sign-in throttling per email and client, in place of per account

Revision ID: 0006_login_throttles
Revises: 0005_key_uses
Create Date: 2026-11-24 22:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_login_throttles"
down_revision: str | None = "0005_key_uses"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "login_throttles",
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("client", sa.String(length=64), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("last_failed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("blocked_until", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("email", "client"),
    )
    with op.batch_alter_table("login_throttles", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_login_throttles_last_failed_at"), ["last_failed_at"], unique=False
        )
    # The per-account counts locked the owner out with the guesser (issue 23); they go.
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_column("login_blocked_until")
        batch_op.drop_column("last_failed_login_at")
        batch_op.drop_column("failed_logins")


def downgrade() -> None:
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.add_column(sa.Column("failed_logins", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("last_failed_login_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("login_blocked_until", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("login_throttles", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_login_throttles_last_failed_at"))
    op.drop_table("login_throttles")
