"""``/api/trash`` (issue 47, docs/api.md "Trash and expiry"): the organization's trash, its
retention, restores and purges. The protocols are ``coffer_edge.trash``'s.

A key confined to a folder subtree (issue 46) cannot use the trash (403): the trash lists the
whole organization's deleted assets, wherever they were.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from starlette.convertors import Convertor, register_url_convertor

from coffer_edge import trash
from coffer_edge.actor import current_actor
from coffer_edge.clients.auth import Principal
from coffer_edge.deps import AuthDep, BlobDep, MetadataDep, PrincipalDep, RequestIdDep, needs
from coffer_edge.routers.webhooks import JSONBodyRoute
from coffer_edge.schemas import Asset as AssetOut
from coffer_edge.schemas import PageLimit, PageOffset, Success, TrashSettingsBody, errors
from coffer_kit.contract.errors import forbidden
from coffer_kit.contract.limits import PAGE_LIMIT_DEFAULT, PAGE_OFFSET_DEFAULT
from coffer_kit.contract.resources import PurgeBatch, TrashList, TrashSettings


class AssetIdConvertor(Convertor[str]):
    """An asset id in a trash path (``ast_…``): ``/api/trash/settings`` is never taken for one,
    so its 405 lists GET and PUT alone."""

    regex = "ast_[^/]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("trash_asset_id", AssetIdConvertor())

router = APIRouter(prefix="/api/trash", tags=["trash"], route_class=JSONBodyRoute)


def _whole_org(principal: Principal) -> None:
    if principal.folder_id is not None:
        raise forbidden("A key confined to a folder cannot use the trash.")


@router.get("/settings", response_model=TrashSettings, responses=errors(), openapi_extra=needs("assets:read"))
async def get_settings(principal: PrincipalDep) -> Any:
    """The organization's trash retention and bound."""
    return {"retentionDays": principal.trash_retention_days, "limitBytes": principal.quota_bytes}


@router.put(
    "/settings",
    response_model=TrashSettings,
    responses=errors(403, 415),
    openapi_extra=needs("assets:delete"),
)
async def put_settings(
    body: TrashSettingsBody, principal: PrincipalDep, auth: AuthDep, rid: RequestIdDep
) -> Any:
    """Set the trash retention (0-90 days; 0: deletes are final): organization keys and owners'
    keys. Applies within 5 seconds."""
    _whole_org(principal)
    trash.require_admin(principal, "change the trash retention")
    days = await auth.set_trash_retention(
        principal.organization_id, body.retentionDays, current_actor(), request_id=rid
    )
    return {"retentionDays": days, "limitBytes": principal.quota_bytes}


@router.get("", response_model=TrashList, responses=errors(), openapi_extra=needs("assets:read"))
async def list_trash(
    principal: PrincipalDep,
    metadata: MetadataDep,
    rid: RequestIdDep,
    limit: Annotated[PageLimit, Query(description="Page size, 1–100.")] = PAGE_LIMIT_DEFAULT,
    offset: Annotated[PageOffset, Query(description="Entries to skip.")] = PAGE_OFFSET_DEFAULT,
) -> Response:
    """The trash, newest trashed first, with who deleted each asset and when it is purged."""
    _whole_org(principal)
    page = await metadata.list_trash(
        principal.organization_id, {"limit": limit, "offset": offset}, request_id=rid
    )
    return Response(page, media_type="application/json")


@router.post(
    "/{asset_id:trash_asset_id}/restore",
    response_model=AssetOut,
    responses=errors(403, 404, 413),
    openapi_extra=needs("assets:write"),
)
async def restore(
    asset_id: str, principal: PrincipalDep, metadata: MetadataDep, blob: BlobDep, rid: RequestIdDep
) -> Response:
    """Restore: the same id, key and URLs, in its folder (or the root if it is gone); 413 if
    its size no longer fits the quota."""
    _whole_org(principal)
    body = await trash.restore_asset(
        principal.organization_id,
        asset_id,
        quota_bytes=principal.quota_bytes,
        only_user=trash.acting_user(principal),
        scan_mode=principal.ingest.scan,
        metadata=metadata,
        blob=blob,
        rid=rid,
    )
    return Response(body, media_type="application/json")


@router.delete(
    "/{asset_id:trash_asset_id}",
    response_model=Success,
    responses=errors(403, 404),
    openapi_extra=needs("assets:delete"),
)
async def purge_one(
    asset_id: str, principal: PrincipalDep, metadata: MetadataDep, blob: BlobDep, rid: RequestIdDep
) -> Any:
    """Purge one trashed asset: metadata and bytes, for good."""
    _whole_org(principal)
    await trash.purge_asset(
        principal.organization_id,
        asset_id,
        only_user=trash.acting_user(principal),
        metadata=metadata,
        blob=blob,
        rid=rid,
    )
    return {"success": True}


@router.delete("", response_model=PurgeBatch, responses=errors(403), openapi_extra=needs("assets:delete"))
async def purge_all(principal: PrincipalDep, metadata: MetadataDep, blob: BlobDep, rid: RequestIdDep) -> Any:
    """Empty the trash, one batch of at most 100 per call (oldest first): call again while
    `remaining` is above 0. Organization keys and owners' keys."""
    _whole_org(principal)
    trash.require_admin(principal, "empty the trash")
    purged, remaining = await trash.purge_batch(principal.organization_id, metadata, blob, rid)
    return {"purged": purged, "remaining": remaining}
