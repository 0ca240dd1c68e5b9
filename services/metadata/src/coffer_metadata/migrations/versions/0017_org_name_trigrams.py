"""PostgreSQL: the name search's trigram index leads with the organization (issue 49)

Revision ID: 0017_org_name_trigrams
Revises: 0016_sqlite_asset_meta
Create Date: 2026-11-28 03:40:00.000000

The trigram index on ``name_key`` alone holds every organization's names: a search in a small
organization read the posting lists of its trigrams across all of them, then dropped the other
organizations' rows (a name search of 10,000 assets beside 6,000,000 others took 46-78 ms,
against 4.4 ms alone; bench/scale.py). A GIN index on (organization_id, name_key trigrams)
(``btree_gin`` gives GIN its equality operator for text) intersects the two: 1.1 ms for that
organization and 5 ms for the one of 1,000,000 (docs/performance.md, "Scale"). SQLite: nothing
(its trigram table is searched, then the organization checked, per organization anyway).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0017_org_name_trigrams"
down_revision: str | None = "0016_sqlite_asset_meta"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # btree_gin ships with PostgreSQL and is a trusted extension (13+), as pg_trgm (0002).
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    op.create_index(
        "ix_assets_org_name_key_trgm",
        "assets",
        ["organization_id", "name_key"],
        postgresql_using="gin",
        postgresql_ops={"name_key": "gin_trgm_ops"},
    )
    op.drop_index("ix_assets_name_key_trgm", table_name="assets")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.create_index(
        "ix_assets_name_key_trgm",
        "assets",
        ["name_key"],
        postgresql_using="gin",
        postgresql_ops={"name_key": "gin_trgm_ops"},
    )
    op.drop_index("ix_assets_org_name_key_trgm", table_name="assets")
