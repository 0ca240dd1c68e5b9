"""upload_tokens.session_id: a dashboard upload's token ends with the session it was minted in

Revision ID: 0016_token_sessions
Revises: 0015_key_successors
Create Date: 2026-11-29 19:30:00.000000

The dashboard's resumable uploads go through an upload token that names the user; their URLs
carry a capability that outlived the session that began them (signed out, revoked, ended by a
password change) by up to a day. The token now records its session, and neither it nor its
uploads act once that session has ended. Tokens minted before name none: as before.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016_token_sessions"
down_revision: str | None = "0015_key_successors"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("upload_tokens") as batch:
        batch.add_column(sa.Column("session_id", sa.String(length=40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("upload_tokens") as batch:
        batch.drop_column("session_id")
