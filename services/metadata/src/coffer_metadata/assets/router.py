"""Internal asset API, called by edge only; organization comes from edge's principal."""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from sqlmodel import Session

from coffer_kit.contract import expiry
from coffer_kit.contract.errors import CofferError, invalid, not_found
from coffer_kit.contract.limits import (
    CURSOR_MAX_CHARS,
    MAX_NAME_CHARS,
    PAGE_LIMIT_DEFAULT,
    PAGE_LIMIT_MAX,
    PAGE_OFFSET_DEFAULT,
    PAGE_OFFSET_MAX,
)
from coffer_kit.contract.names import normalize_name
from coffer_kit.contract.resources import Visibility
from coffer_kit.contract.urls import asset_prefix
from coffer_kit.contract.wire import (
    Done,
    Hidden,
    IntentIn,
    IntentOut,
    StoredUsage,
    SweepCandidates,
    UploadCommit,
    UploadTarget,
)
from coffer_kit.db import DatabaseState, run_read
from coffer_kit.internal_token import require_internal_token
from coffer_kit.routes import LeanRoute, json_body, json_request_body
from coffer_kit.state import request_state
from coffer_metadata import subtree
from coffer_metadata.assets import filters as asset_filters
from coffer_metadata.assets import repository, service
from coffer_metadata.deps import DatabaseDep, SessionDep, SettingsDep
from coffer_metadata.events import ActorDep, actor_of
from coffer_metadata.folders.service import UNSET, Unset, check_folder
from coffer_metadata.names import default_name
from coffer_metadata.subtree import SubtreeDep

Sort = repository.Sort

router = APIRouter(prefix="/internal/v1")


# The hot routes (the asset GET, the upload's two writes) are lean routes: each reads its
# request itself, the internal token first, instead of through FastAPI's dependency solver,
# whose work per request cost more than the SQL (coffer_kit.routes). main.py includes this
# router without the internal token dependency, which a lean route would never run.
hot_router = APIRouter(prefix="/internal/v1", route_class=LeanRoute)


# The upload's two writes go through ``Database.write``: on SQLite the group commit
# (concurrent uploads share a transaction and its fsync, each one worker-thread trip), on
# PostgreSQL a transaction on the event loop in one or two exchanges with the server.
@hot_router.post("/orgs/{org_id}/intents", status_code=201, openapi_extra=json_request_body(IntentIn))
async def register_intent(request: Request, org_id: str) -> Response:
    await require_internal_token(request)
    body = await json_body(request, IntentIn)
    state = request_state(request, DatabaseState)
    intent = service.NewIntent(
        org_id=org_id,
        asset_id=body.asset_id,
        max_in_flight=state.settings.metadata_max_uploads_in_flight,
        reserve_bytes=body.reserve_bytes,
        least_bytes=body.least_bytes,
        quota_bytes=body.quota_bytes,
        idle_seconds=state.settings.metadata_tus_idle_seconds,
    )
    admitted = await state.database.write(
        functools.partial(service.register_intent, intent=intent),
        on_loop=functools.partial(service.register_intent_on_loop, intent=intent),
    )
    out = IntentOut(
        prefix=asset_prefix(org_id, body.asset_id),
        room_bytes=admitted.room_bytes,
        used_bytes=admitted.used_bytes,
    )
    return Response(out.wire(), status_code=201, media_type="application/json")


@router.delete("/orgs/{org_id}/intents/{asset_id}")
async def abandon_intent(org_id: str, asset_id: str, database: DatabaseDep) -> Done:
    await database.write(functools.partial(service.abandon_upload, org_id=org_id, asset_id=asset_id))
    return Done()


@router.post("/orgs/{org_id}/intents/{asset_id}/released")
async def release_intent(org_id: str, asset_id: str, database: DatabaseDep) -> Done:
    await database.write(functools.partial(service.release_upload, org_id=org_id, asset_id=asset_id))
    return Done()


@hot_router.post("/orgs/{org_id}/assets", status_code=201, openapi_extra=json_request_body(UploadCommit))
async def commit_upload(request: Request, org_id: str) -> JSONResponse:
    await require_internal_token(request)
    body = await json_body(request, UploadCommit)
    state = request_state(request, DatabaseState)
    folder_id = body.folder_id or None
    if (root := subtree.of_request(request)) is not None:
        where = functools.partial(subtree.folder_or_root, org_id=org_id, root=root, folder_id=folder_id)
        folder_id = await run_read(state.database.engine, where)
    commit = {
        "actor": actor_of(request),
        "org_id": org_id,
        "asset_id": body.id,
        "key": body.key,
        "name": body.name if body.name is not None else default_name(body.filename, body.key),
        "folder_id": folder_id,
        "mime_type": body.mime_type,
        "size": body.size,
        "sha256": body.sha256,
        "quota_bytes": body.quota_bytes,
        "visibility": body.visibility,
        "detected_type": body.detected_type,
        "scan_status": body.scan_status,
        "expires_at": body.expires_at,
        "metadata": body.metadata,
        "tags": body.tags,
        "cdn_url": state.settings.cdn_url,
        "idle_seconds": state.settings.metadata_tus_idle_seconds,
    }
    asset = await state.database.write(
        functools.partial(service.commit_upload_view, **commit),
        on_loop=functools.partial(service.commit_upload_view_on_loop, **commit),
    )
    return JSONResponse(asset, status_code=201)


# The two hot reads, answered without re-encoding: a page in one worker-thread trip, one asset
# by key on the event loop (coffer_kit.db.KeyedRead).
@router.get("/orgs/{org_id}/assets")
async def list_assets(
    request: Request,
    org_id: str,
    database: DatabaseDep,
    settings: SettingsDep,
    limit: Annotated[int, Query(ge=1, le=PAGE_LIMIT_MAX)] = PAGE_LIMIT_DEFAULT,
    # A signed 64-bit integer, as both databases store OFFSET; 2**63 overflowed into a 500.
    offset: Annotated[int, Query(ge=0, le=PAGE_OFFSET_MAX)] = PAGE_OFFSET_DEFAULT,
    folder_id: Annotated[str | None, Query(alias="folderId")] = None,
    q: Annotated[str | None, Query(min_length=1, max_length=MAX_NAME_CHARS)] = None,
    sort: Annotated[Sort, Query()] = repository.DEFAULT_SORT,
    visibility: Annotated[Visibility | None, Query()] = None,
    recursive: Annotated[bool, Query()] = False,
    root: SubtreeDep = None,
    cursor: Annotated[str | None, Query(max_length=CURSOR_MAX_CHARS)] = None,
    total: Annotated[bool | None, Query()] = None,
) -> JSONResponse:
    filters = asset_filters.parse(request.query_params)
    if (
        cursor is None
        and total is not False
        and not filters
        and not recursive
        and root is None
        and folder_id is None
        and q is None
        and sort == repository.DEFAULT_SORT
        and visibility is None
        and offset <= repository.FIRST_PAGE_OFFSET_MAX
    ):
        # Every asset, near the start: the page and its total in one statement on the loop.
        first = await service.first_page_views(
            database, org_id=org_id, limit=limit, offset=offset, cdn_url=settings.cdn_url
        )
        if first is not None:
            return JSONResponse(first)
    page = functools.partial(
        service.list_views,
        org_id=org_id,
        folder_id=folder_id,
        limit=limit,
        offset=offset,
        cdn_url=settings.cdn_url,
        q=q,
        sort=sort,
        visibility=visibility,
        subtree=root,
        cursor=cursor,
        with_total=total,
        filters=filters,
        recursive=recursive,
    )
    return JSONResponse(await run_read(database.engine, page))


@hot_router.get("/orgs/{org_id}/assets/{asset_id}")
async def get_asset(request: Request, org_id: str, asset_id: str) -> JSONResponse:
    await require_internal_token(request)
    state = request_state(request, DatabaseState)
    root = subtree.of_request(request)
    try:
        view = await service.read_view(
            state.database, org_id=org_id, asset_id=asset_id, cdn_url=state.settings.cdn_url
        )
    except CofferError as exc:
        if root is not None and exc.status == 403:  # another organization's: outside, so unknown
            raise not_found(f"Asset {asset_id} does not exist.") from None
        raise
    if root is not None:
        where = view["folderId"]

        def within(session: Session) -> bool:
            return where is not None and subtree.inside(session, org_id=org_id, root=root, folder_id=where)

        if not await run_read(state.database.engine, within):
            raise not_found(f"Asset {asset_id} does not exist.")
    return JSONResponse(view)


@router.get("/orgs/{org_id}/usage")
async def get_usage(org_id: str, database: DatabaseDep) -> StoredUsage:
    one = functools.partial(service.usage_view, org_id=org_id)
    return await run_read(database.engine, one)


@router.post("/orgs/{org_id}/upload-targets")
def check_target(org_id: str, body: UploadTarget, session: SessionDep, root: SubtreeDep) -> UploadTarget:
    """Where a future upload will go (an upload token's scope): the folder exists and is the
    organization's (and in a subtree key's subtree: its root when none is named), the name is
    valid. Answers the name normalised."""
    folder_id = subtree.folder_or_root(session, org_id=org_id, root=root, folder_id=body.folder_id or None)
    if folder_id is not None:
        check_folder(session, org_id=org_id, folder_id=folder_id)
    name = normalize_name(body.name) if body.name is not None else None
    return UploadTarget(folder_id=folder_id, name=name)


class AssetPatch(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str | None = None
    folder_id: str | None = Field(default=None, alias="folderId")
    visibility: Visibility | None = None
    # Issue 47: an ISO 8601 time, or null to clear it.
    expires_at: str | None = Field(default=None, alias="expiresAt", max_length=expiry.MAX_CHARS)
    # Issue 50, checked by the service (one envelope, naming the field).
    metadata: Any = None
    tags: Any = None


@router.patch("/orgs/{org_id}/assets/{asset_id}")
def update_asset(
    org_id: str,
    asset_id: str,
    body: AssetPatch,
    session: SessionDep,
    settings: SettingsDep,
    actor: ActorDep,
    root: SubtreeDep,
) -> JSONResponse:
    sent = body.model_fields_set
    if "name" in sent and body.name is None:
        raise invalid("'name' must be a string.", field="name")
    if "visibility" in sent and body.visibility is None:
        raise invalid("'visibility' is 'public' or 'private'.", field="visibility")
    if "metadata" in sent and body.metadata is None:
        raise invalid("'metadata' must be a JSON object.", field="metadata")
    if "tags" in sent and body.tags is None:
        raise invalid('\'tags\' is {"add": [...], "remove": [...]}.', field="tags")
    if not sent & {"name", "folder_id", "visibility", "expires_at", "metadata", "tags"}:
        raise invalid(
            "Send 'name', 'folderId', 'visibility', 'expiresAt', 'metadata' or 'tags'.", field="body"
        )
    # None keeps the expiry, UNSET clears it (service.update).
    expires: datetime | Unset | None = None
    if "expires_at" in sent:
        expires = expiry.parse_expires_at(body.expires_at) if body.expires_at is not None else Unset()
    subtree.in_turn(session, org_id=org_id, root=root)
    subtree.require_asset_inside(session, org_id=org_id, root=root, asset_id=asset_id)
    folder: str | object | None = UNSET
    if "folder_id" in sent:
        folder = subtree.folder_or_root(session, org_id=org_id, root=root, folder_id=body.folder_id or None)
    asset = service.update(
        session,
        org_id=org_id,
        asset_id=asset_id,
        name=body.name,
        folder_id=folder,  # type: ignore[arg-type]
        visibility=body.visibility,
        cdn_url=settings.cdn_url,
        actor=actor,
        expires_at=expires,
        metadata=body.metadata,
        tags=body.tags,
    )
    return JSONResponse(service.view(asset, settings.cdn_url))


@router.post("/orgs/{org_id}/assets/{asset_id}/tombstone")
def hide_asset(
    org_id: str, asset_id: str, session: SessionDep, settings: SettingsDep, actor: ActorDep, root: SubtreeDep
) -> Hidden:
    subtree.in_turn(session, org_id=org_id, root=root)
    subtree.require_asset_inside(session, org_id=org_id, root=root, asset_id=asset_id)
    return Hidden(
        key=service.hide(session, org_id=org_id, asset_id=asset_id, cdn_url=settings.cdn_url, actor=actor)
    )


@router.delete("/tombstones/{asset_id}")
def finish_delete(asset_id: str, session: SessionDep) -> Done:
    service.finish_delete(session, asset_id=asset_id)
    return Done()


@router.post("/sweep")
def sweep(
    session: SessionDep,
    intent_age: Annotated[float, Query(alias="intentAgeSeconds", ge=0)] = 3600,
    tombstone_age: Annotated[float, Query(alias="tombstoneAgeSeconds", ge=0)] = 60,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> SweepCandidates:
    """Claim stale upload intents and list stale tombstones for edge's sweeper."""
    return service.sweep_candidates(
        session,
        intent_age=timedelta(seconds=intent_age),
        tombstone_age=timedelta(seconds=tombstone_age),
        limit=limit,
    )


@router.delete("/sweep/intents/{asset_id}")
def finish_intent(asset_id: str, session: SessionDep) -> Done:
    service.finish_intent(session, asset_id=asset_id)
    return Done()
