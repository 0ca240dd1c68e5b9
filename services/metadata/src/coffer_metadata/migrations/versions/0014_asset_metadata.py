"""assets: custom metadata, tags, image facts and their queue (issue 50)

Revision ID: 0014_asset_metadata
Revises: 0013_retention
Create Date: 2026-11-27 20:40:00.000000

Plain ``ADD COLUMN``s with server defaults on both databases (no table copy on SQLite, so the
rowids the name search index (0003) is keyed by stay). Existing assets get ``{}`` and ``[]``
and no image facts (they are not computed for them).

PostgreSQL: ``custom_metadata`` and ``tags`` are ``jsonb`` with GIN indexes
(``jsonb_path_ops``: containment, ``@>``, is what the filters ask). SQLite: JSON text; each
asset's tags are also in ``asset_tags`` (organization, tag, asset), kept by triggers on
``assets``, so a tag filter reads an index instead of every row's JSON.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0014_asset_metadata"
down_revision: str | None = "0013_retention"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SQLITE_TAGS = (
    "CREATE TABLE asset_tags (asset_id VARCHAR(40) NOT NULL, organization_id VARCHAR(40) NOT NULL,"
    " tag TEXT NOT NULL, PRIMARY KEY (asset_id, tag)) WITHOUT ROWID",
    "CREATE INDEX ix_asset_tags_org_tag ON asset_tags (organization_id, tag, asset_id)",
    "CREATE TRIGGER asset_tags_insert AFTER INSERT ON assets BEGIN"
    " INSERT OR IGNORE INTO asset_tags (asset_id, organization_id, tag)"
    " SELECT new.id, new.organization_id, value FROM json_each(new.tags); END",
    "CREATE TRIGGER asset_tags_update AFTER UPDATE OF tags ON assets BEGIN"
    " DELETE FROM asset_tags WHERE asset_id = old.id;"
    " INSERT OR IGNORE INTO asset_tags (asset_id, organization_id, tag)"
    " SELECT new.id, new.organization_id, value FROM json_each(new.tags); END",
    "CREATE TRIGGER asset_tags_delete AFTER DELETE ON assets BEGIN"
    " DELETE FROM asset_tags WHERE asset_id = old.id; END",
)


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    document = postgresql.JSONB() if postgres else sa.JSON()
    op.add_column(
        "assets", sa.Column("custom_metadata", document, nullable=False, server_default=sa.text("'{}'"))
    )
    op.add_column("assets", sa.Column("tags", document, nullable=False, server_default=sa.text("'[]'")))
    op.add_column("assets", sa.Column("image", document, nullable=True))
    op.add_column("assets", sa.Column("placeholder", sa.String(length=128), nullable=True))
    op.add_column("assets", sa.Column("facts_due_at", sa.DateTime(timezone=True), nullable=True))
    # A trashed asset keeps them (0011_trash moves the whole row; a restore moves it back).
    op.add_column(
        "trashed_assets",
        sa.Column("custom_metadata", document, nullable=False, server_default=sa.text("'{}'")),
    )
    op.add_column(
        "trashed_assets", sa.Column("tags", document, nullable=False, server_default=sa.text("'[]'"))
    )
    op.add_column("trashed_assets", sa.Column("image", document, nullable=True))
    op.add_column("trashed_assets", sa.Column("placeholder", sa.String(length=128), nullable=True))
    op.add_column("trashed_assets", sa.Column("facts_due_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_assets_facts_due",
        "assets",
        ["facts_due_at"],
        postgresql_where=sa.text("facts_due_at IS NOT NULL"),
        sqlite_where=sa.text("facts_due_at IS NOT NULL"),
    )
    if postgres:
        op.create_index(
            "ix_assets_metadata_gin",
            "assets",
            ["custom_metadata"],
            postgresql_using="gin",
            postgresql_ops={"custom_metadata": "jsonb_path_ops"},
        )
        op.create_index(
            "ix_assets_tags_gin",
            "assets",
            ["tags"],
            postgresql_using="gin",
            postgresql_ops={"tags": "jsonb_path_ops"},
        )
    else:
        for statement in _SQLITE_TAGS:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_assets_tags_gin", table_name="assets")
        op.drop_index("ix_assets_metadata_gin", table_name="assets")
    else:
        for trigger in ("insert", "update", "delete"):
            op.execute(f"DROP TRIGGER asset_tags_{trigger}")
        op.execute("DROP TABLE asset_tags")
    op.drop_index("ix_assets_facts_due", table_name="assets")
    for column in ("facts_due_at", "placeholder", "image", "tags", "custom_metadata"):
        op.drop_column("trashed_assets", column)
        op.drop_column("assets", column)
