"""indexes for keyset pagination (issue 49, "Listings built for scale")

Revision ID: 0012_cursors
Revises: 0011_trash
Create Date: 2026-11-27 21:00:00.000000

A cursor page seeks to ``(sort column, id)`` within its scope and reads ``limit + 1`` rows, at
any depth, when an index holds that order: assets by name and by size within the
organization (newest-first and visibility already have theirs), delivery attempts of an
endpoint and unfinished uploads of an organization with the id as the tie-break. And the
indexes the folder foreign keys need (``make bench-scale`` found a subtree delete scanning
every asset once per deleted folder). Plain ``CREATE INDEX`` on both databases.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0012_cursors"
down_revision: str | None = "0011_trash"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = [
    ("ix_assets_org_name", "assets", ["organization_id", "name", "id"]),
    ("ix_assets_org_size", "assets", ["organization_id", "size", "id"]),
    ("ix_webhook_attempts_endpoint_page", "webhook_attempts", ["endpoint_id", "created_at", "id"]),
    ("ix_tus_uploads_org_page", "tus_uploads", ["organization_id", "created_at", "id"]),
    # The foreign keys' own lookups: deleting a folder makes the database find the assets
    # that point at it (ON DELETE SET NULL) and its child folders (ON DELETE CASCADE) by
    # that column alone, which no index led with: one scan of the whole table per deleted
    # folder, so deleting a subtree cost (its folders × every asset of every organization).
    ("ix_assets_folder", "assets", ["folder_id"]),
    ("ix_folders_parent", "folders", ["parent_id"]),
]


def upgrade() -> None:
    for name, table, columns in INDEXES:
        op.create_index(name, table, columns)


def downgrade() -> None:
    for name, table, _ in reversed(INDEXES):
        op.drop_index(name, table_name=table)
