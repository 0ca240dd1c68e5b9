"""updated_at on folders and assets; the case-folded name and its search indexes

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 17:45:00.000000

Existing rows: ``updated_at`` starts equal to ``created_at`` (nothing was ever renamed or
moved); ``name_key`` is computed here in Python, as the service computes it. ``sha256`` was
stored from the start (0001), so every existing asset has it already.
"""

import unicodedata
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BATCH = 1000


def _fill_name_keys() -> None:
    bind = op.get_bind()
    assets = sa.table(
        "assets", sa.column("id", sa.String), sa.column("name", sa.String), sa.column("name_key")
    )
    last = ""
    while True:
        rows = bind.execute(
            sa.select(assets.c.id, assets.c.name)
            .where(assets.c.id > last)
            .order_by(assets.c.id)
            .limit(_BATCH)
        ).all()
        if not rows:
            return
        bind.execute(
            assets.update().where(assets.c.id == sa.bindparam("b_id")).values(name_key=sa.bindparam("b_key")),
            [{"b_id": r.id, "b_key": unicodedata.normalize("NFC", r.name).casefold()} for r in rows],
        )
        last = rows[-1].id


def upgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for table in ("folders", "assets"):
        with op.batch_alter_table(table) as batch_op:
            batch_op.add_column(sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True))
        op.execute(f"UPDATE {table} SET updated_at = created_at")
        with op.batch_alter_table(table) as batch_op:
            batch_op.alter_column("updated_at", existing_type=sa.DateTime(timezone=True), nullable=False)
    with op.batch_alter_table("assets") as batch_op:
        batch_op.add_column(sa.Column("name_key", sa.Text(), nullable=True))
    _fill_name_keys()
    with op.batch_alter_table("assets") as batch_op:
        batch_op.alter_column("name_key", existing_type=sa.Text(), nullable=False)
        batch_op.create_index("ix_assets_org_name_key", ["organization_id", "name_key"], unique=False)
    if postgresql:
        # pg_trgm ships with PostgreSQL and is a trusted extension (13+): the database owner
        # may create it.
        op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        op.create_index(
            "ix_assets_name_key_trgm",
            "assets",
            ["name_key"],
            postgresql_using="gin",
            postgresql_ops={"name_key": "gin_trgm_ops"},
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_assets_name_key_trgm", table_name="assets")
    with op.batch_alter_table("assets") as batch_op:
        batch_op.drop_index("ix_assets_org_name_key")
        batch_op.drop_column("name_key")
        batch_op.drop_column("updated_at")
    with op.batch_alter_table("folders") as batch_op:
        batch_op.drop_column("updated_at")
