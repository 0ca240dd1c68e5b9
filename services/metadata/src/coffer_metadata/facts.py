"""The image facts queue (issue 50): images committed with ``facts_due_at`` set, and their facts.

An upload whose declared or detected type is an image the transforms read is committed with
``facts_due_at`` set, in the upload's own transaction (assets.service._described), so a
committed image always has its facts queued. edge's facts relay (coffer_edge.facts) claims
due assets (moving ``facts_due_at`` past a lease, so a relay that died gives them back), asks
blob to read each one on a transform worker, and reports here: facts are recorded with an
``asset.updated`` event in one transaction, which webhooks read; no facts (not an image after
all) end the job quietly, with no event.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

from fastapi import APIRouter
from sqlmodel import Session

from coffer_kit.contract.errors import not_found
from coffer_kit.contract.timeutil import utcnow
from coffer_kit.contract.wire import SYSTEM, FactsClaim, FactsJob, FactsJobs, ImageFactsOut
from coffer_metadata import events
from coffer_metadata.assets.service import view
from coffer_metadata.deps import DatabaseDep, SettingsDep
from coffer_metadata.due import DueQueue
from coffer_metadata.models import Asset

router = APIRouter(prefix="/internal/v1")
_QUEUE = DueQueue("facts_due_at")


def claim(session: Session, *, limit: int, lease_seconds: float) -> FactsJobs:
    """Lease up to ``limit`` due assets, oldest due first; and how many are pending in all."""
    rows, pending = _QUEUE.lease(
        session, ("organization_id", "key"), limit=limit, lease_seconds=lease_seconds
    )
    jobs = [FactsJob(asset_id=r.id, organization_id=r.organization_id, key=r.key) for r in rows]
    return FactsJobs(jobs=jobs, pending=pending)


def report(
    session: Session, *, org_id: str, asset_id: str, facts: ImageFactsOut, cdn_url: str
) -> dict[str, Any]:
    """Record an image's facts (and ``asset.updated``), or end a job that found none; the asset
    as the contract writes it. A report for a job that ended already changes nothing."""
    asset = session.get(Asset, asset_id)
    if asset is None or asset.organization_id != org_id:
        raise not_found(f"Asset {asset_id} does not exist.")
    if asset.facts_due_at is None:
        return view(asset, cdn_url)
    asset.facts_due_at = None
    found = facts.width is not None and facts.height is not None
    if facts.width is not None and facts.height is not None:
        before = {"image": asset.image, "placeholder": asset.placeholder}
        asset.image = {"width": facts.width, "height": facts.height, "orientation": facts.orientation or 1}
        asset.placeholder = facts.placeholder
        asset.updated_at = utcnow()
    session.add(asset)
    session.flush()
    public = view(SimpleNamespace(**asset.model_dump()), cdn_url)
    if found:
        events.record(
            session,
            org_id=org_id,
            type="asset.updated",
            data=public,
            actor=SYSTEM,
            changes=before,
            now=asset.updated_at,
        )
    return public


@router.post("/facts/claim")
async def claim_facts(body: FactsClaim, database: DatabaseDep) -> FactsJobs:
    if (pending := await _QUEUE.idle(database)) is not None:
        return FactsJobs(jobs=[], pending=pending)
    return await database.write(functools.partial(claim, limit=body.limit, lease_seconds=body.lease_seconds))


@router.post("/orgs/{org_id}/facts/{asset_id}")
async def report_facts(
    org_id: str, asset_id: str, body: ImageFactsOut, database: DatabaseDep, settings: SettingsDep
) -> dict[str, Any]:
    return await database.write(
        functools.partial(report, org_id=org_id, asset_id=asset_id, facts=body, cdn_url=settings.cdn_url)
    )
