"""Benchmark fixture: 100,000 assets in one organization, written straight into metadata's
database through its own SQLModel tables (no uploads, no bytes: only listing reads them)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from sqlalchemy import create_engine, insert
from ulid import ULID

from coffer_metadata.models import Asset, Usage

BATCH = 5000


def seed_assets(database_url: str, *, org_id: str, count: int, size: int = 4096) -> float:
    """Insert ``count`` asset rows and the matching usage row; the seconds it took."""
    started = time.perf_counter()
    engine = create_engine(database_url)
    newest = datetime.now(UTC) - timedelta(minutes=5)
    try:
        with engine.begin() as conn:
            for first in range(0, count, BATCH):
                rows = []
                for i in range(first, min(first + BATCH, count)):
                    # One per second, oldest first, so ids and created_at order agree as in real use.
                    created = newest - timedelta(seconds=count - i)
                    asset_id = f"ast_{ULID.from_datetime(created)}"
                    name = f"seed-{i:06d}.bin"
                    rows.append(
                        {
                            "id": asset_id,
                            "organization_id": org_id,
                            "folder_id": None,
                            "key": f"{org_id}/{asset_id}/{name}",
                            "name": name,
                            "mime_type": "application/octet-stream",
                            "size": size,
                            "sha256": "0" * 64,
                            "created_at": created,
                        }
                    )
                conn.execute(insert(Asset.__table__), rows)  # type: ignore[attr-defined]
            conn.execute(
                insert(Usage.__table__).values(  # type: ignore[attr-defined]
                    organization_id=org_id, used_bytes=count * size, asset_count=count
                )
            )
        if engine.dialect.name == "postgresql":
            # What autovacuum would have done by the time an organization holds 100,000 assets.
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.exec_driver_sql("ANALYZE assets")
    finally:
        engine.dispose()
    return time.perf_counter() - started
