"""Asset operations: the metadata halves of the upload and delete protocols (DESIGN.md)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from prometheus_client import Counter
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from coffer_kit.errors import CofferError, forbidden, invalid, not_found
from coffer_kit.timeutil import isoformat, utcnow
from coffer_kit.tracing import tracer
from coffer_kit.urls import public_url
from coffer_metadata.assets import repository
from coffer_metadata.folders.service import require_folder
from coffer_metadata.models import Asset
from coffer_metadata.names import normalize_name

QUOTA_REJECTIONS = Counter(
    "coffer_quota_rejections_total", "Uploads refused because they would exceed the quota."
)


def view(asset: Asset | Row, cdn_url: str) -> dict[str, Any]:  # type: ignore[type-arg]
    """An asset (a model or a row of its public fields) as the contract writes it."""
    return {
        "id": asset.id,
        "organizationId": asset.organization_id,
        "folderId": asset.folder_id,
        "key": asset.key,
        "name": asset.name,
        "mimeType": asset.mime_type,
        "size": asset.size,
        "publicUrl": public_url(cdn_url, asset.key),
        "createdAt": isoformat(asset.created_at),
    }


def _missing(session: Session, asset_id: str) -> CofferError:
    """Why the organization has no such asset: 403 if it is another's, 404 if none."""
    if repository.owner_of(session, asset_id) is not None:
        return forbidden(f"Asset {asset_id} belongs to another organization.")
    return not_found(f"Asset {asset_id} does not exist.")


def get_view(session: Session, *, org_id: str, asset_id: str, cdn_url: str) -> dict[str, Any]:
    """The organization's asset as the contract writes it; 403 or 404 otherwise."""
    row = repository.get_row(session, org_id=org_id, asset_id=asset_id)
    if row is None:
        raise _missing(session, asset_id)
    return view(row, cdn_url)


def key_prefix(org_id: str, asset_id: str) -> str:
    """Everything an upload may write lives under this prefix."""
    return f"{org_id}/{asset_id}/"


def register_intent(session: Session, *, org_id: str, asset_id: str) -> None:
    """Step 1 of an upload: remember that bytes may soon exist under the asset's prefix."""
    try:
        with session.begin_nested():
            repository.add_intent(
                session,
                org_id=org_id,
                asset_id=asset_id,
                key_prefix=key_prefix(org_id, asset_id),
                now=utcnow(),
            )
    except IntegrityError:
        raise CofferError(409, "conflict", f"An upload for {asset_id} is already registered.") from None


def commit_upload(
    session: Session,
    *,
    org_id: str,
    asset_id: str,
    key: str,
    name: str,
    folder_id: str | None,
    mime_type: str,
    size: int,
    sha256: str,
    quota_bytes: int,
) -> Asset:
    """Step 3: check the folder, reserve quota, insert the asset, consume the intent — one transaction."""
    if not key.startswith(key_prefix(org_id, asset_id)):
        raise invalid("The key does not belong to this asset.", field="key")
    name = normalize_name(name)
    if folder_id is not None:
        require_folder(session, org_id=org_id, folder_id=folder_id, field="folderId")
    with tracer.start_as_current_span("quota.reserve"):
        reserved = repository.reserve(session, org_id=org_id, size=size, quota_bytes=quota_bytes)
    if not reserved:
        QUOTA_REJECTIONS.inc()
        used = repository.usage(session, org_id=org_id).used_bytes
        raise CofferError(
            413,
            "quota_exceeded",
            f"Storing {size} bytes would exceed the organization's quota.",
            details={"usedBytes": used, "quotaBytes": quota_bytes, "requestedBytes": size},
        )
    if not repository.consume_intent(session, org_id=org_id, asset_id=asset_id):
        # The sweeper claimed this upload (or it never registered): its bytes are being deleted.
        raise CofferError(409, "conflict", "The upload took too long and was abandoned; upload again.")
    asset = Asset(
        id=asset_id,
        organization_id=org_id,
        folder_id=folder_id,
        key=key,
        name=name,
        mime_type=mime_type,
        size=size,
        sha256=sha256,
        created_at=utcnow(),
    )
    session.add(asset)
    session.flush()
    return asset


def abandon_upload(session: Session, *, org_id: str, asset_id: str) -> None:
    """After edge deleted a failed upload's bytes: forget its intent."""
    repository.consume_intent(session, org_id=org_id, asset_id=asset_id)


def list_views(
    session: Session, *, org_id: str, folder_id: str | None, limit: int, offset: int, cdn_url: str
) -> dict[str, Any]:
    """A page of assets and the total that match, as the contract writes them.

    ``folder_id`` "" means root level only.
    """
    root_only = folder_id == ""
    folder = folder_id or None
    if folder is not None:
        require_folder(session, org_id=org_id, folder_id=folder, field="folderId")
    items = repository.page(
        session, org_id=org_id, folder_id=folder, root_only=root_only, limit=limit, offset=offset
    )
    total = repository.count(session, org_id=org_id, folder_id=folder, root_only=root_only)
    return {"assets": [view(a, cdn_url) for a in items], "total": total, "limit": limit, "offset": offset}


def hide(session: Session, *, org_id: str, asset_id: str) -> str:
    """Step 1 of a delete: drop the row, release its quota, leave a tombstone. Returns the key.

    Idempotent: deleting again while the tombstone is there answers the same key, so a
    client can retry a delete whose byte deletion failed.
    """
    asset = repository.get(session, org_id=org_id, asset_id=asset_id)
    if asset is None:
        stone = repository.tombstone(session, org_id=org_id, asset_id=asset_id)
        if stone is not None:
            return stone.key
        raise _missing(session, asset_id)
    repository.release(session, org_id=org_id, size=asset.size)
    repository.add_tombstone(session, asset=asset, now=utcnow())
    session.delete(asset)
    session.flush()
    return asset.key


def finish_delete(session: Session, *, asset_id: str) -> None:
    """Step 3 of a delete, once blob has deleted the bytes."""
    repository.drop_tombstone(session, asset_id=asset_id)


def sweep_candidates(
    session: Session, *, intent_age: timedelta, tombstone_age: timedelta, limit: int
) -> dict[str, list[dict[str, str]]]:
    """Claim stale intents and list stale tombstones for the sweeper."""
    now: datetime = utcnow()
    intents = repository.claim_stale_intents(session, older_than=now - intent_age, limit=limit)
    tombstones = repository.stale_tombstones(session, older_than=now - tombstone_age, limit=limit)
    return {
        "intents": [
            {"assetId": i.asset_id, "organizationId": i.organization_id, "prefix": i.key} for i in intents
        ],
        "tombstones": [
            {"assetId": t.asset_id, "organizationId": t.organization_id, "key": t.key} for t in tombstones
        ],
    }


def finish_intent(session: Session, *, asset_id: str) -> None:
    """The sweeper deleted a stale upload's bytes: drop its intent."""
    repository.drop_intent(session, asset_id=asset_id)
