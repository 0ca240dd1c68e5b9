"""``coffer-metadata manifest``: what the store should hold, as JSON lines, for blob's scrub.

metadata owns the rows and blob the bytes, and neither reads the other's store (docs/
architecture.md), so the scrub (``coffer-blob scrub --manifest``, issue 47) is handed this
list. One line per:

- asset, live or in the trash (a trashed asset's row is in ``trashed_assets``, and it still
  owns its object until it is purged): ``state`` ``asset``, with the key, size and SHA-256
  its object must have, and the flags it must carry (``private``, ``trashed``: the CDN reads
  them from the object, and a store copied later than the database restores them out of
  step: ``coffer-blob scrub --flags``);
- delete in progress (a tombstone: the row is gone, the bytes are being deleted): ``deleting``;
- upload in flight (an upload intent, or a resumable upload not completed): ``uploading``.

The last two own whatever is under their asset's prefix and expect nothing. The last line is
``{"end": true, "count": N, "at": "…"}`` (N the lines before it; ``at`` when the snapshot was
taken, so that the scrub's ``--flags fix`` refuses a stale one): the scrub refuses a manifest
without it, which a dump cut short (a crash, a full disk, a broken pipe) would be, since every
object such a manifest leaves out would look like an orphan. Every line is read in one
transaction (a snapshot: REPEATABLE READ on PostgreSQL, one read transaction in
SQLite's WAL), streamed a page at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, Any

from sqlalchemy import Table, select
from sqlalchemy.engine import Connection, Engine
from sqlmodel import SQLModel

from coffer_kit.contract.timeutil import utcnow
from coffer_metadata.models import Asset, Tombstone, TrashedAsset, TusUpload, UploadIntent

# Rows fetched from the database at a time.
PAGE_ROWS = 1000


def _stamp(value: Any) -> str:
    return value.isoformat() if value is not None else ""


def _table(model: type[SQLModel]) -> Table:
    table: Table = model.__table__  # type: ignore[attr-defined]
    return table


def lines(conn: Connection) -> Iterator[dict[str, Any]]:
    """The manifest's entries (module docstring), assets first."""
    for model, trashed in ((Asset, False), (TrashedAsset, True)):
        a = _table(model).c
        assets = select(a.organization_id, a.id, a.key, a.size, a.sha256, a.created_at, a.visibility)
        for org, asset, key, size, sha256, created, visibility in conn.execute(
            assets.execution_options(yield_per=PAGE_ROWS)
        ):
            yield {
                "org": org,
                "asset": asset,
                "key": key,
                "size": size,
                "sha256": sha256,
                "created": _stamp(created),
                "state": "asset",
                "private": visibility == "private",
                "trashed": trashed,
            }
    tus = _table(TusUpload)
    owners = [
        (select(t.c.organization_id, t.c.asset_id, t.c.key, t.c.created_at), state)
        for t, state in ((_table(Tombstone), "deleting"), (_table(UploadIntent), "uploading"))
    ]
    unfinished = select(tus.c.organization_id, tus.c.asset_id, tus.c.key, tus.c.created_at)
    owners.append((unfinished.where(tus.c.completed.is_(False)), "uploading"))
    for query, state in owners:
        for org, asset, key, created in conn.execute(query.execution_options(yield_per=PAGE_ROWS)):
            yield {"org": org, "asset": asset, "key": key, "created": _stamp(created), "state": state}


def write_manifest(engine: Engine, out: IO[str]) -> int:
    """Write the manifest to ``out`` from one snapshot, then its end line; answers the number
    of entries."""
    count = 0
    at = utcnow()  # (no later than the snapshot's start)
    options: dict[str, Any] = {"stream_results": True}
    if engine.dialect.name == "postgresql":
        options["isolation_level"] = "REPEATABLE READ"
    with engine.connect().execution_options(**options) as conn, conn.begin():
        for entry in lines(conn):
            out.write(json.dumps(entry, separators=(",", ":")) + "\n")
            count += 1
    out.write(json.dumps({"end": True, "count": count, "at": at.isoformat()}, separators=(",", ":")) + "\n")
    return count
