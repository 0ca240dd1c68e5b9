"""assets: a partial index of the assets whose hold follows the scan mode (issue 48)

Revision ID: 0018_scan_holds
Revises: 0017_org_name_trigrams
Create Date: 2026-11-29 07:00:00.000000

A change of an organization's scan mode holds or releases its files still ``pending`` or
``unscanned`` (coffer_edge.scans); this index holds those alone, by organization and id, so
the sync pages through them without reading the organization's other assets.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018_scan_holds"
down_revision: str | None = "0017_org_name_trigrams"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WHERE = "scan_status IN ('pending', 'unscanned')"


def upgrade() -> None:
    op.create_index(
        "ix_assets_scan_hold",
        "assets",
        ["organization_id", "id"],
        postgresql_where=sa.text(WHERE),
        sqlite_where=sa.text(WHERE),
    )


def downgrade() -> None:
    op.drop_index("ix_assets_scan_hold", table_name="assets")
