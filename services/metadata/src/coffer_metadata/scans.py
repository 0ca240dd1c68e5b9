"""The malware scan queue (issue 48): pending scans kept with the assets, and their results.

An upload whose organization scans is committed with ``scan_status = 'pending'`` and
``scan_due_at`` set, in the upload's own transaction, so a committed upload always has its
scan queued. edge's scan relay (coffer_edge.scans) claims due scans (moving ``scan_due_at``
past a lease, so a relay that died gives them back), asks blob to stream each object to
clamd, and reports here: a result ends the scan and writes ``asset.scanned`` (and
``asset.infected``) into the outbox in the same transaction, which webhooks and the audit log
read; a failure is retried when edge says, until edge gives up (``unscanned``).
"""

from __future__ import annotations

import functools
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter
from sqlmodel import Session

from coffer_kit.contract.errors import not_found
from coffer_kit.contract.timeutil import as_utc, utcnow
from coffer_kit.contract.wire import SYSTEM, ScanClaim, ScanJob, ScanJobs, ScanReport
from coffer_kit.db import KeyedRead
from coffer_metadata import events
from coffer_metadata.assets.service import view
from coffer_metadata.deps import DatabaseDep, SettingsDep
from coffer_metadata.models import Asset

router = APIRouter(prefix="/internal/v1")
_assets = Asset.__table__  # type: ignore[attr-defined]
# Pending scans and the earliest due, read before any claim (the partial index alone): an idle
# queue costs each relay's poll one read, never a write transaction (SQLite's single writer).
_QUEUE = KeyedRead(
    sa.select(sa.func.count().label("pending"), sa.func.min(_assets.c.scan_due_at).label("due")).where(
        _assets.c.scan_due_at.is_not(None)
    )
)


def claim(session: Session, *, limit: int, lease_seconds: float) -> ScanJobs:
    """Lease up to ``limit`` due scans, oldest due first; and how many are pending in all."""
    now = utcnow()
    due = (
        sa.select(_assets.c.id, _assets.c.organization_id, _assets.c.key, _assets.c.scan_attempts)
        .where(_assets.c.scan_due_at.is_not(None), _assets.c.scan_due_at <= now)
        .order_by(_assets.c.scan_due_at)
        .limit(limit)
    )
    if session.get_bind().dialect.name == "postgresql":
        due = due.with_for_update(skip_locked=True)  # (SQLite has one writer)
    connection = session.connection()
    rows = connection.execute(due).all()
    if rows:
        connection.execute(
            sa.update(_assets)
            .where(_assets.c.id.in_([r[0] for r in rows]))
            .values(scan_due_at=now + timedelta(seconds=lease_seconds))
        )
    pending = connection.execute(
        sa.select(sa.func.count()).select_from(_assets).where(_assets.c.scan_due_at.is_not(None))
    ).scalar_one()
    jobs = [ScanJob(asset_id=r[0], organization_id=r[1], key=r[2], attempts=r[3]) for r in rows]
    return ScanJobs(jobs=jobs, pending=int(pending))


def report(
    session: Session, *, org_id: str, asset_id: str, result: ScanReport, cdn_url: str
) -> dict[str, Any]:
    """Record a scan's result or its retry; the asset as the contract writes it. A result for a
    scan that ended already changes nothing (a relay that resent it)."""
    asset = session.get(Asset, asset_id)
    if asset is None or asset.organization_id != org_id:
        raise not_found(f"Asset {asset_id} does not exist.")
    if asset.scan_status != "pending":
        return view(asset, cdn_url)
    asset.scan_attempts += 1
    if result.status == "retry":
        asset.scan_due_at = utcnow() + timedelta(seconds=result.retry_seconds)
        session.add(asset)
        session.flush()
        return view(asset, cdn_url)
    asset.scan_status = result.status
    asset.scan_signature = result.signature if result.status == "infected" else None
    asset.scan_due_at = None
    session.add(asset)
    session.flush()
    public = view(SimpleNamespace(**asset.model_dump()), cdn_url)
    now = utcnow()
    events.record(session, org_id=org_id, type="asset.scanned", data=public, actor=SYSTEM, now=now)
    if result.status == "infected":
        events.record(session, org_id=org_id, type="asset.infected", data=public, actor=SYSTEM, now=now)
    return public


@router.post("/scans/claim")
async def claim_scans(body: ScanClaim, database: DatabaseDep) -> ScanJobs:
    queue = await _QUEUE.first(database, {})
    if queue is None or not queue.pending or as_utc(queue.due) > utcnow():
        return ScanJobs(jobs=[], pending=int(queue.pending) if queue is not None else 0)
    return await database.write(functools.partial(claim, limit=body.limit, lease_seconds=body.lease_seconds))


@router.post("/orgs/{org_id}/scans/{asset_id}")
async def report_scan(
    org_id: str, asset_id: str, body: ScanReport, database: DatabaseDep, settings: SettingsDep
) -> dict[str, Any]:
    return await database.write(
        functools.partial(report, org_id=org_id, asset_id=asset_id, result=body, cdn_url=settings.cdn_url)
    )
