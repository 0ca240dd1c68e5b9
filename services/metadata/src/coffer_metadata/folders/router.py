"""Internal folder API, called by edge only; organization comes from edge's principal."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlmodel import Session

from coffer_kit.db import SessionDep, run_read
from coffer_metadata.folders import service

router = APIRouter(prefix="/internal/v1/orgs/{org_id}/folders")


class FolderIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    parent_id: str | None = Field(default=None, alias="parentId")


@router.get("")
async def list_folders(
    org_id: str, request: Request, parent_id: Annotated[str | None, Query(alias="parentId")] = None
) -> JSONResponse:
    def children(session: Session) -> dict[str, Any]:
        folders = service.list_children(session, org_id=org_id, parent_id=parent_id or None)
        return {"folders": [service.view(f) for f in folders]}

    return JSONResponse(await run_read(request.app.state.engine, children))


@router.post("", status_code=201)
def create_folder(org_id: str, body: FolderIn, session: SessionDep) -> dict[str, Any]:
    folder = service.create(session, org_id=org_id, name=body.name, parent_id=body.parent_id or None)
    return service.view(folder)


@router.delete("/{folder_id}")
def delete_folder(org_id: str, folder_id: str, session: SessionDep) -> dict[str, bool]:
    service.delete_tree(session, org_id=org_id, folder_id=folder_id)
    return {"success": True}
