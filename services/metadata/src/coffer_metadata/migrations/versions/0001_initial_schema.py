"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22 21:23:53.119513
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

# The first revision: nothing before it, no branches, no dependencies.
revision = "0001"
down_revision = branch_labels = depends_on = None


def upgrade() -> None:
    op.create_table(
        "folders",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column("organization_id", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column("parent_id", sa.String(length=40), nullable=True),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=1024), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["parent_id"], ["folders.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("folders", schema=None) as batch_op:
        batch_op.create_index(
            "uq_folders_root_name",
            ["organization_id", "name"],
            unique=True,
            sqlite_where=sa.text("parent_id IS NULL"),
            postgresql_where=sa.text("parent_id IS NULL"),
        )
        batch_op.create_index(
            "uq_folders_sibling_name",
            ["organization_id", "parent_id", "name"],
            unique=True,
            sqlite_where=sa.text("parent_id IS NOT NULL"),
            postgresql_where=sa.text("parent_id IS NOT NULL"),
        )

    op.create_table(
        "tombstones",
        sa.Column("asset_id", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column("organization_id", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column("key", sqlmodel.sql.sqltypes.AutoString(length=2048), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("asset_id"),
    )
    with op.batch_alter_table("tombstones", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_tombstones_created_at"), ["created_at"], unique=False)

    op.create_table(
        "upload_intents",
        sa.Column("asset_id", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column("organization_id", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column("key", sqlmodel.sql.sqltypes.AutoString(length=2048), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("swept", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.PrimaryKeyConstraint("asset_id"),
    )
    with op.batch_alter_table("upload_intents", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_upload_intents_created_at"), ["created_at"], unique=False)

    op.create_table(
        "usage",
        sa.Column("organization_id", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column("used_bytes", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("asset_count", sa.BigInteger(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("organization_id"),
    )
    op.create_table(
        "assets",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column("organization_id", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column("folder_id", sa.String(length=40), nullable=True),
        sa.Column("key", sa.String(length=2048), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=1024), nullable=False),
        sa.Column("mime_type", sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["folder_id"], ["folders.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key"),
    )
    with op.batch_alter_table("assets", schema=None) as batch_op:
        batch_op.create_index("ix_assets_org_created", ["organization_id", "created_at", "id"], unique=False)
        batch_op.create_index(
            "ix_assets_org_folder_created", ["organization_id", "folder_id", "created_at", "id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("assets", schema=None) as batch_op:
        batch_op.drop_index("ix_assets_org_folder_created")
        batch_op.drop_index("ix_assets_org_created")

    op.drop_table("assets")
    op.drop_table("usage")
    with op.batch_alter_table("upload_intents", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_upload_intents_created_at"))

    op.drop_table("upload_intents")
    with op.batch_alter_table("tombstones", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_tombstones_created_at"))

    op.drop_table("tombstones")
    with op.batch_alter_table("folders", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_folders_sibling_name",
            sqlite_where=sa.text("parent_id IS NOT NULL"),
            postgresql_where=sa.text("parent_id IS NOT NULL"),
        )
        batch_op.drop_index(
            "uq_folders_root_name",
            sqlite_where=sa.text("parent_id IS NULL"),
            postgresql_where=sa.text("parent_id IS NULL"),
        )

    op.drop_table("folders")
