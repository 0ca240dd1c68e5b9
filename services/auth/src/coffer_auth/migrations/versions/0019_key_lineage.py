"""api_keys.replaced_key_ids: every key a rotation line replaced, kept on the newest

Revision ID: 0019_key_lineage
Revises: 0018_known_devices
Create Date: 2026-11-29 22:40:00.000000

A signed URL dies with the key that made it, or with the key that replaced that one by
rotation (``coffer_auth.grants``). Walking ``rotated_from_key_id`` back lost the line at a key
rotated without grace (its row is deleted at once): the ids are now kept on each new key.
Keys rotated before this migration start their line here (at most a day's rotations, since
0015, are not remembered).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019_key_lineage"
down_revision: str | None = "0018_known_devices"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("replaced_key_ids", sa.Text(), nullable=False, server_default=""))
    # A key already rotated names at least the key it replaced.
    op.execute(
        "UPDATE api_keys SET replaced_key_ids = rotated_from_key_id WHERE rotated_from_key_id IS NOT NULL"
    )


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("replaced_key_ids")
