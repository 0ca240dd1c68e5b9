"""Benchmark fixture: 100,000 assets in one organization, written straight into metadata's
database through its own SQLModel tables (no uploads, no bytes: only listing reads them).

Names vary like real ones (a word, a number, an extension) so name searches match a few rows
or many; the first ``MOVING_ASSETS`` assets sit in one folder, which the move figure moves.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import create_engine, insert
from ulid import ULID

from coffer_kit.contract.names import search_key
from coffer_metadata.models import Asset, Folder, Usage

BATCH = 5000
WORDS = ("invoice", "photo", "report", "holiday", "contract", "scan", "draft", "logo")
EXTENSIONS = ("pdf", "jpg", "png", "docx")
MOVING_ASSETS = 10_000


@dataclass(frozen=True)
class Seeded:
    seconds: float
    moving_folder: str  # holds MOVING_ASSETS assets
    parents: tuple[str, str]  # two folders the moving one goes back and forth between


def seed_name(i: int) -> str:
    return f"{WORDS[i % len(WORDS)]}-{i:06d}.{EXTENSIONS[i // len(WORDS) % len(EXTENSIONS)]}"


def seed_assets(database_url: str, *, org_id: str, count: int, size: int = 4096) -> Seeded:
    """Insert ``count`` asset rows, three folders and the matching usage row."""
    started = time.perf_counter()
    engine = create_engine(database_url)
    newest = datetime.now(UTC) - timedelta(minutes=5)
    folder_ids = [f"fld_{ULID()}" for _ in range(3)]
    moving, parents = folder_ids[0], (folder_ids[1], folder_ids[2])
    try:
        with engine.begin() as conn:
            conn.execute(
                insert(Folder.__table__),  # type: ignore[attr-defined]
                [
                    {
                        "id": fid,
                        "organization_id": org_id,
                        "parent_id": parents[0] if fid == moving else None,
                        "name": name,
                        "created_at": newest,
                        "updated_at": newest,
                    }
                    for fid, name in zip(folder_ids, ("moving", "parent-a", "parent-b"), strict=True)
                ][::-1],  # the parents first
            )
            for first in range(0, count, BATCH):
                rows = []
                for i in range(first, min(first + BATCH, count)):
                    # One per second, oldest first, so ids and created_at order agree as in real use.
                    created = newest - timedelta(seconds=count - i)
                    asset_id = f"ast_{ULID.from_datetime(created)}"
                    name = seed_name(i)
                    rows.append(
                        {
                            "id": asset_id,
                            "organization_id": org_id,
                            "folder_id": moving if i < MOVING_ASSETS else None,
                            "key": f"{org_id}/{asset_id}/{name}",
                            "name": name,
                            "name_key": search_key(name),
                            "mime_type": "application/octet-stream",
                            "size": size,
                            "sha256": "0" * 64,
                            "created_at": created,
                            "updated_at": created,
                        }
                    )
                conn.execute(insert(Asset.__table__), rows)  # type: ignore[attr-defined]
            conn.execute(
                insert(Usage.__table__).values(  # type: ignore[attr-defined]
                    organization_id=org_id, used_bytes=count * size, asset_count=count
                )
            )
        if engine.dialect.name == "postgresql":
            # What autovacuum would have done by the time an organization holds 100,000 assets
            # (PostgreSQL 13+ vacuums after inserts too). The vacuum also merges the trigram
            # index's pending list: left full after a bulk insert (about 400 pages), every
            # search reads it whole, 42 ms for a rare name under load, 1.4 ms once merged.
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.exec_driver_sql("VACUUM ANALYZE assets")
    finally:
        engine.dispose()
    return Seeded(time.perf_counter() - started, moving, parents)
