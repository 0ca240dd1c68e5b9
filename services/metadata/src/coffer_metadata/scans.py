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
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Query
from sqlmodel import Session, col, select, text

from coffer_kit.contract.errors import not_found
from coffer_kit.contract.timeutil import utcnow
from coffer_kit.contract.wire import (
    SYSTEM,
    ScanClaim,
    ScanHoldAsset,
    ScanHoldAssets,
    ScanJob,
    ScanJobs,
    ScanReport,
)
from coffer_metadata import events
from coffer_metadata.assets.service import view
from coffer_metadata.deps import DatabaseDep, SessionDep, SettingsDep
from coffer_metadata.due import DueQueue
from coffer_metadata.models import SCAN_HOLD_WHERE, Asset, TrashedAsset

router = APIRouter(prefix="/internal/v1")
_Row = TypeVar("_Row", Asset, TrashedAsset)
_QUEUE = DueQueue("scan_due_at")


def claim(session: Session, *, limit: int, lease_seconds: float) -> ScanJobs:
    """Lease up to ``limit`` due scans, oldest due first; and how many are pending in all."""
    rows, pending = _QUEUE.lease(
        session, ("organization_id", "key", "scan_attempts"), limit=limit, lease_seconds=lease_seconds
    )
    jobs = [
        ScanJob(asset_id=r.id, organization_id=r.organization_id, key=r.key, attempts=r.scan_attempts)
        for r in rows
    ]
    return ScanJobs(jobs=jobs, pending=pending)


def report(
    session: Session, *, org_id: str, asset_id: str, result: ScanReport, cdn_url: str
) -> dict[str, Any]:
    """Record a scan's result or its retry; the asset as the contract writes it. A result for a
    scan that ended already changes nothing (a relay that resent it).

    An asset trashed while it was scanned keeps the result in the trash, for its restore: blob
    has acted on it already (an infected object is held), and a restore that found it still
    pending released that hold (issue 48)."""
    asset = _locked(session, org_id=org_id, asset_id=asset_id)
    if asset is None:
        raise not_found(f"Asset {asset_id} does not exist.")
    if asset.scan_status != "pending":
        return view(SimpleNamespace(**asset.model_dump()), cdn_url)
    asset.scan_attempts += 1
    if result.status == "retry":
        asset.scan_due_at = utcnow() + timedelta(seconds=result.retry_seconds)
        session.add(asset)
        session.flush()
        return view(SimpleNamespace(**asset.model_dump()), cdn_url)
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


def _locked(session: Session, *, org_id: str, asset_id: str) -> Asset | TrashedAsset | None:
    """The organization's asset, live or trashed, locked until this transaction ends. Read
    unlocked, a restore or a trash that moved the row before the write left the write nothing
    to update (a 500, the result lost). A lookup that waited for such a move finds the row gone
    from its table, so the other table is read again after it: live, trash, live (a restore
    while this waited), trash (a trash then)."""
    for _ in range(2):
        live = _row_locked(session, Asset, org_id=org_id, asset_id=asset_id)
        if live is not None:
            return live
        trashed = _row_locked(session, TrashedAsset, org_id=org_id, asset_id=asset_id)
        if trashed is not None:
            return trashed
    return None


def _row_locked(session: Session, table: type[_Row], *, org_id: str, asset_id: str) -> _Row | None:
    query = select(table).where(col(table.organization_id) == org_id, col(table.id) == asset_id)
    return session.exec(query.with_for_update()).first()


@router.post("/scans/claim")
async def claim_scans(body: ScanClaim, database: DatabaseDep) -> ScanJobs:
    if (pending := await _QUEUE.idle(database)) is not None:
        return ScanJobs(jobs=[], pending=pending)
    return await database.write(functools.partial(claim, limit=body.limit, lease_seconds=body.lease_seconds))


@router.post("/orgs/{org_id}/scans/{asset_id}")
async def report_scan(
    org_id: str, asset_id: str, body: ScanReport, database: DatabaseDep, settings: SettingsDep
) -> dict[str, Any]:
    return await database.write(
        functools.partial(report, org_id=org_id, asset_id=asset_id, result=body, cdn_url=settings.cdn_url)
    )


@router.get("/orgs/{org_id}/scan-holds")
def scan_holds(
    org_id: str,
    session: SessionDep,
    after: Annotated[str, Query(max_length=40)] = "",
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
) -> ScanHoldAssets:
    """An organization's live assets whose hold follows its scan mode (``pending``, ``unscanned``),
    by id after ``after``: what a change of the mode holds or releases (coffer_edge.scans).
    The partial index ``ix_assets_scan_hold`` holds them alone."""
    rows = session.exec(
        select(Asset.id, Asset.key, Asset.scan_status)
        .where(col(Asset.organization_id) == org_id, col(Asset.id) > after, text(SCAN_HOLD_WHERE))
        .order_by(col(Asset.organization_id), col(Asset.id))
        .limit(limit)
    )
    return ScanHoldAssets(assets=[ScanHoldAsset(asset_id=i, key=k, scan_status=str(s)) for i, k, s in rows])
