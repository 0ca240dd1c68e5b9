"""Internal folder API, called by edge only; organization comes from edge's principal."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlmodel import Session

from coffer_kit.contract.errors import invalid
from coffer_kit.contract.expiry import ExpiryDays
from coffer_kit.contract.resources import Folder, FolderCreate
from coffer_kit.contract.wire import Done, SubtreeCounts
from coffer_kit.db import run_read
from coffer_metadata import subtree
from coffer_metadata.deps import DatabaseDep, SessionDep
from coffer_metadata.events import ActorDep
from coffer_metadata.folders import repository, service
from coffer_metadata.subtree import SubtreeDep

router = APIRouter(prefix="/internal/v1/orgs/{org_id}/folders")


@router.get("")
async def list_folders(
    org_id: str,
    database: DatabaseDep,
    root: SubtreeDep,
    parent_id: Annotated[str | None, Query(alias="parentId")] = None,
) -> JSONResponse:
    def children(session: Session) -> dict[str, Any]:
        parent = subtree.folder_or_root(session, org_id=org_id, root=root, folder_id=parent_id or None)
        folders = service.list_children(session, org_id=org_id, parent_id=parent)
        return {"folders": [service.view(f) for f in folders]}

    return JSONResponse(await run_read(database.engine, children))


@router.get("/{folder_id}")
async def get_folder(org_id: str, folder_id: str, database: DatabaseDep, root: SubtreeDep) -> JSONResponse:
    def one(session: Session) -> dict[str, Any]:
        subtree.require_inside(session, org_id=org_id, root=root, folder_id=folder_id)
        folder = service.get_with_path(session, org_id=org_id, folder_id=folder_id)
        if root is not None:  # the path starts at the key's root: nothing above it exists for it
            ids = [step["id"] for step in folder["path"]]
            folder["path"] = folder["path"][ids.index(root) :]
            if folder_id == root:
                folder["parentId"] = None
        return folder

    return JSONResponse(await run_read(database.engine, one))


@router.get("/{folder_id}/subtree")
async def subtree_counts(
    org_id: str, folder_id: str, database: DatabaseDep, root: SubtreeDep
) -> SubtreeCounts:
    """What deleting the folder touches, counted in the database (the dashboard's delete page
    made two calls per folder of the subtree for it)."""

    def count(session: Session) -> SubtreeCounts:
        subtree.require_inside(session, org_id=org_id, root=root, folder_id=folder_id)
        service.require_folder(session, org_id=org_id, folder_id=folder_id)
        folders, assets = repository.subtree_counts(session, org_id=org_id, folder_id=folder_id)
        return SubtreeCounts(folders=folders, assets=assets)

    return await run_read(database.engine, count)


@router.post("", status_code=201)
def create_folder(
    org_id: str, body: FolderCreate, session: SessionDep, actor: ActorDep, root: SubtreeDep
) -> Folder:
    subtree.in_turn(session, org_id=org_id, root=root)
    parent = subtree.folder_or_root(session, org_id=org_id, root=root, folder_id=body.parentId or None)
    folder = service.create(
        session, org_id=org_id, name=body.name, parent_id=parent, actor=actor, expiry_days=body.expiryDays
    )
    return Folder.model_validate(service.view(folder))


class FolderPatch(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str | None = None
    parent_id: str | None = Field(default=None, alias="parentId")
    expiry_days: ExpiryDays | None = Field(default=None, alias="expiryDays")


@router.patch("/{folder_id}")
def update_folder(
    org_id: str, folder_id: str, body: FolderPatch, session: SessionDep, actor: ActorDep, root: SubtreeDep
) -> Folder:
    sent = body.model_fields_set
    if "name" in sent and body.name is None:
        raise invalid("'name' must be a string.", field="name")
    if not sent & {"name", "parent_id", "expiry_days"}:
        raise invalid("Send 'name', 'parentId' or 'expiryDays'.", field="body")
    subtree.in_turn(session, org_id=org_id, root=root)
    subtree.require_inside(session, org_id=org_id, root=root, folder_id=folder_id)
    subtree.require_not_root(root, folder_id)
    parent: str | service.Unset | None = service.UNSET
    if "parent_id" in sent:
        parent = subtree.folder_or_root(session, org_id=org_id, root=root, folder_id=body.parent_id or None)
    folder = service.update(
        session,
        org_id=org_id,
        folder_id=folder_id,
        name=body.name,
        parent_id=parent,
        actor=actor,
        expiry_days=body.expiry_days if "expiry_days" in sent else service.UNSET,
    )
    return Folder.model_validate(service.view(folder))


@router.delete("/{folder_id}")
def delete_folder(
    org_id: str, folder_id: str, session: SessionDep, actor: ActorDep, root: SubtreeDep
) -> Done:
    subtree.in_turn(session, org_id=org_id, root=root)
    subtree.require_inside(session, org_id=org_id, root=root, folder_id=folder_id)
    subtree.require_not_root(root, folder_id)
    # A subtree key's deleted folders leave their assets in its root, not where it cannot see.
    service.delete_tree(session, org_id=org_id, folder_id=folder_id, actor=actor, assets_to=root)
    return Done()
