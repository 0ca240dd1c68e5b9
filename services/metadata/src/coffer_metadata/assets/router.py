"""Internal asset API, called by edge only; organization comes from edge's principal."""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from coffer_kit.db import SessionDep, run_read
from coffer_metadata.assets import service
from coffer_metadata.names import default_name

router = APIRouter(prefix="/internal/v1")


class IntentIn(BaseModel):
    asset_id: str = Field(alias="assetId", pattern=r"^ast_[0-9A-Z]{26}$")


class AssetIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str = Field(pattern=r"^ast_[0-9A-Z]{26}$")
    key: str = Field(min_length=1, max_length=2048)
    # None: named after the uploaded file.
    name: str | None = None
    filename: str = ""
    folder_id: str | None = Field(default=None, alias="folderId")
    mime_type: str = Field(alias="mimeType", min_length=1, max_length=255)
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    quota_bytes: int = Field(alias="quotaBytes", ge=0)


def _cdn(request: Request) -> str:
    return request.app.state.settings.cdn_url  # type: ignore[no-any-return]


@router.post("/orgs/{org_id}/intents", status_code=201)
def register_intent(org_id: str, body: IntentIn, session: SessionDep) -> dict[str, str]:
    service.register_intent(session, org_id=org_id, asset_id=body.asset_id)
    return {"prefix": service.key_prefix(org_id, body.asset_id)}


@router.delete("/orgs/{org_id}/intents/{asset_id}")
def abandon_intent(org_id: str, asset_id: str, session: SessionDep) -> dict[str, bool]:
    service.abandon_upload(session, org_id=org_id, asset_id=asset_id)
    return {"success": True}


@router.post("/orgs/{org_id}/assets", status_code=201)
def commit_upload(org_id: str, body: AssetIn, request: Request, session: SessionDep) -> dict[str, Any]:
    asset = service.commit_upload(
        session,
        org_id=org_id,
        asset_id=body.id,
        key=body.key,
        name=body.name if body.name is not None else default_name(body.filename, body.key),
        folder_id=body.folder_id or None,
        mime_type=body.mime_type,
        size=body.size,
        sha256=body.sha256,
        quota_bytes=body.quota_bytes,
    )
    return service.view(asset, _cdn(request))


# The two hot reads: one worker-thread trip each, answered without re-encoding.
@router.get("/orgs/{org_id}/assets")
async def list_assets(
    org_id: str,
    request: Request,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
    folder_id: Annotated[str | None, Query(alias="folderId")] = None,
) -> JSONResponse:
    page = functools.partial(
        service.list_views,
        org_id=org_id,
        folder_id=folder_id,
        limit=limit,
        offset=offset,
        cdn_url=_cdn(request),
    )
    return JSONResponse(await run_read(request.app.state.engine, page))


@router.get("/orgs/{org_id}/assets/{asset_id}")
async def get_asset(org_id: str, asset_id: str, request: Request) -> JSONResponse:
    one = functools.partial(service.get_view, org_id=org_id, asset_id=asset_id, cdn_url=_cdn(request))
    return JSONResponse(await run_read(request.app.state.engine, one))


@router.post("/orgs/{org_id}/assets/{asset_id}/tombstone")
def hide_asset(org_id: str, asset_id: str, session: SessionDep) -> dict[str, str]:
    return {"key": service.hide(session, org_id=org_id, asset_id=asset_id)}


@router.delete("/tombstones/{asset_id}")
def finish_delete(asset_id: str, session: SessionDep) -> dict[str, bool]:
    service.finish_delete(session, asset_id=asset_id)
    return {"success": True}


@router.post("/sweep")
def sweep(
    session: SessionDep,
    intent_age: Annotated[float, Query(alias="intentAgeSeconds", ge=0)] = 3600,
    tombstone_age: Annotated[float, Query(alias="tombstoneAgeSeconds", ge=0)] = 60,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """Claim stale upload intents and list stale tombstones for edge's sweeper."""
    return service.sweep_candidates(
        session,
        intent_age=timedelta(seconds=intent_age),
        tombstone_age=timedelta(seconds=tombstone_age),
        limit=limit,
    )


@router.delete("/sweep/intents/{asset_id}")
def finish_intent(asset_id: str, session: SessionDep) -> dict[str, bool]:
    service.finish_intent(session, asset_id=asset_id)
    return {"success": True}
