"""api_keys.parent_key_id: a key made by a key dies with it

Revision ID: 0014_key_parents
Revises: 0013_scan_sync
Create Date: 2026-11-29 17:00:00.000000

A key made through the key API (``POST /api/keys`` with a key) records the key that made it;
deleting that key deletes it too (and a rotation hands it to the new key). Keys made before
this migration record none: they live on as before.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_key_parents"
down_revision: str | None = "0013_scan_sync"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("parent_key_id", sa.String(length=40), nullable=True))
        batch.create_index("ix_api_keys_parent_key_id", ["parent_key_id"])
        batch.create_foreign_key(
            "fk_api_keys_parent_key_id", "api_keys", ["parent_key_id"], ["id"], ondelete="CASCADE"
        )


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_constraint("fk_api_keys_parent_key_id", type_="foreignkey")
        batch.drop_index("ix_api_keys_parent_key_id")
        batch.drop_column("parent_key_id")
