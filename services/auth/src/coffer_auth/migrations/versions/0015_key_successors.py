"""api_keys.rotated_from_key_id: a rotation's new key names the key it replaced

Revision ID: 0015_key_successors
Revises: 0014_key_parents
Create Date: 2026-11-29 19:00:00.000000

An upload token, and a resumable upload begun with one, record the key that minted it. A
rotation ends no authority, so they follow that key to the key that replaced it
(``upload_tokens._minter``). Keys rotated before this migration name none: their tokens end
with the old key, as before.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_key_successors"
down_revision: str | None = "0014_key_parents"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("rotated_from_key_id", sa.String(length=40), nullable=True))
        batch.create_index("ix_api_keys_rotated_from_key_id", ["rotated_from_key_id"])


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_index("ix_api_keys_rotated_from_key_id")
        batch.drop_column("rotated_from_key_id")
