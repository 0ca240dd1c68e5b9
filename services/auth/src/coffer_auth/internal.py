"""Internal API: the one question edge asks on every request, the audit of file changes, and
the queue of revoked grants edge relays to blob."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query
from pydantic import Field
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session, col, select

from coffer_auth import admin, audit, grants, orgs
from coffer_auth.deps import DatabaseDep, SessionDep
from coffer_auth.models import Organization
from coffer_kit.contract.errors import not_found
from coffer_kit.contract.wire import (
    MAX_REVOCATIONS,
    Actor,
    Done,
    GrantRevocations,
    Ingest,
    Principal,
    RelayedRevocations,
    ScanSyncClaim,
    ScanSyncDone,
    ScanSyncEnded,
    ScanSyncs,
    TrashRetentionIn,
    TrashRetentions,
    WireModel,
)
from coffer_kit.db import writer
from coffer_kit.internal_token import require_internal_token

log = logging.getLogger("coffer.auth")
router = APIRouter(prefix="/internal/v1", dependencies=[Depends(require_internal_token)])


@router.get("/principal")
def principal(
    database: DatabaseDep,
    session: SessionDep,
    key_hash: Annotated[str, Header(alias="x-key-hash", min_length=64, max_length=64)],
    organization_id: Annotated[str | None, Header(alias="x-organization-id")] = None,
) -> Principal:
    """Resolve a key's SHA-256 (the raw key never crosses the network) to a principal."""
    resolved = admin.resolve_principal(
        session, key_hash=key_hash.lower(), organization_id=organization_id or None
    )
    key_id = resolved.principal.key_id
    # Best effort, in its own short write transaction, so lookups stay read-only and concurrent.
    try:
        with Session(writer(database.engine)) as write:
            admin.touch_key(
                write,
                key_id=key_id,
                organization_id=resolved.principal.organization_id,
                last_used_at=resolved.last_used_at,
            )
            write.commit()
    except SQLAlchemyError:
        log.warning("could not record key use", extra={"key_id": key_id})
    return resolved.principal


@router.get("/orgs/{org_id}/ingest")
def ingest(org_id: str, session: SessionDep) -> Ingest:
    """An organization's ingest rules (issue 48), for a resumable upload's completion, which
    may come with the upload's capability rather than a key."""
    org = session.get(Organization, org_id)
    if org is None:
        raise not_found(f"Organization {org_id} does not exist.")
    return org.ingest()


@router.post("/scan-syncs/claim")
def claim_scan_syncs(body: ScanSyncClaim, session: SessionDep) -> ScanSyncs:
    """Issue 48: organizations whose scan mode changed, for edge's scan relay to hold or release
    the files stored before the change (coffer_edge.scans)."""
    return ScanSyncs(
        syncs=orgs.claim_scan_syncs(
            session, limit=body.limit, settle_seconds=body.settle_seconds, lease_seconds=body.lease_seconds
        )
    )


@router.post("/orgs/{org_id}/scan-sync/ended")
def end_scan_sync(org_id: str, body: ScanSyncDone, session: SessionDep) -> ScanSyncEnded:
    ended = orgs.end_scan_sync(
        session, org_id=org_id, generation=body.generation, leased_until=body.leased_until
    )
    return ScanSyncEnded(ended=ended)


@router.put("/orgs/{org_id}/trash/retention")
def set_trash_retention(org_id: str, body: TrashRetentionIn, session: SessionDep) -> TrashRetentionIn:
    """Issue 47: an organization's trash retention, set through the public API (edge has
    checked that the caller is an organization key or an owner's key)."""
    actor = audit.change_actor(session, body.actor.model_dump()) if body.actor else audit.OPERATOR
    org = admin.set_trash_retention(session, org_id=org_id, days=body.trash_retention_days, actor=actor)
    return TrashRetentionIn(trash_retention_days=org.trash_retention_days)


@router.post("/orgs/trash-retentions")
def trash_retentions(body: TrashRetentions, session: SessionDep) -> TrashRetentions:
    """Issue 47: the retentions of some organizations, for edge's expiry sweeper."""
    found: dict[str, int] = dict.fromkeys(body.organization_ids, 0)
    quotas: dict[str, int] = dict.fromkeys(body.organization_ids, 0)
    if found:
        rows = session.exec(
            select(Organization.id, Organization.trash_retention_days, Organization.quota_bytes).where(
                col(Organization.id).in_(list(found))
            )
        )
        for org_id, days, quota in rows:
            found[org_id], quotas[org_id] = int(days), int(quota)
    return TrashRetentions(retentions=found, quotas=quotas)


class ChangeEvent(WireModel):
    """A change to a file or folder, from metadata's outbox (coffer_metadata.events)."""

    id: str = Field(max_length=40)
    organization_id: str = Field(max_length=40)
    type: str = Field(max_length=32)
    created_at: datetime
    data: dict[str, Any]
    changes: dict[str, Any] = Field(default_factory=dict)
    actor: Actor


class ChangeEventsIn(WireModel):
    events: list[ChangeEvent] = Field(max_length=500)


@router.post("/audit/changes")
def record_changes(body: ChangeEventsIn, session: SessionDep) -> Done:
    """Record changes to files and folders in their organizations' audit logs (edge relays
    them from metadata); an event already recorded is skipped, so relaying twice is harmless."""
    audit.record_changes(session, [e.model_dump() for e in body.events])
    return Done()


class RevocationsDeleted(WireModel):
    deleted: int


@router.get("/grant-revocations")
def grant_revocations(
    session: SessionDep, limit: Annotated[int, Query(ge=1, le=MAX_REVOCATIONS)] = 500
) -> GrantRevocations:
    """The authorities that stopped acting (a key deleted, a member removed), oldest first, for
    edge to relay to blob: signed URLs die with their authority (``grants``)."""
    return GrantRevocations(revocations=grants.pending(session, limit=limit))


@router.post("/grant-revocations/relayed")
def grant_revocations_relayed(body: RelayedRevocations, session: SessionDep) -> RevocationsDeleted:
    """blob has stored these: they leave the queue (unknown seqs are ignored)."""
    return RevocationsDeleted(deleted=grants.relayed(session, body.seqs))
