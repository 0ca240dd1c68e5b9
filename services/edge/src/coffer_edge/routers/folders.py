"""``/api/folders`` (docs/contract.md §5)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.routing import APIRoute

from coffer_edge.deps import MetadataDep, PrincipalDep, RequestIdDep, needs
from coffer_edge.schemas import Folder as FolderOut
from coffer_edge.schemas import FolderCreate, FolderList, FolderUpdate, FolderWithPath, Success, errors
from coffer_kit.contract.errors import invalid, unsupported_media_type


def require_json(request: Request) -> None:
    """415 unless a request with a body declares it as JSON."""
    if request.method not in ("POST", "PUT", "PATCH"):
        return
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        raise unsupported_media_type("Send the body as JSON (Content-Type: application/json).")


class JSONRoute(APIRoute):
    """Checks the media type before FastAPI parses the body, so a form post is 415, not 400."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            require_json(request)
            return await handler(request)

        return checked


router = APIRouter(prefix="/api/folders", tags=["folders"], route_class=JSONRoute)


@router.get("", response_model=FolderList, responses=errors(404), openapi_extra=needs("folders:read"))
async def list_folders(
    principal: PrincipalDep,
    metadata: MetadataDep,
    rid: RequestIdDep,
    parent_id: Annotated[
        str | None, Query(alias="parentId", description="List this folder's children; omitted = root.")
    ] = None,
) -> Response:
    """List the folders under a parent (or at root), ordered by name, then id."""
    # metadata's JSON is the public body byte for byte (see routers/assets.py, list_assets).
    folders = await metadata.list_folders(principal.organization_id, parent_id, request_id=rid)
    return Response(folders, media_type="application/json")


@router.post(
    "",
    status_code=201,
    response_model=FolderOut,
    responses=errors(404, 409, 415),
    openapi_extra=needs("folders:write"),
)
async def create_folder(
    body: FolderCreate, principal: PrincipalDep, metadata: MetadataDep, rid: RequestIdDep
) -> Any:
    """Create a folder at root or under ``parentId``, with an optional default expiry."""
    return await metadata.create_folder(
        principal.organization_id, body.name, body.parentId, expiry_days=body.expiryDays, request_id=rid
    )


@router.get(
    "/{folder_id}", response_model=FolderWithPath, responses=errors(404), openapi_extra=needs("folders:read")
)
async def get_folder(
    folder_id: str, principal: PrincipalDep, metadata: MetadataDep, rid: RequestIdDep
) -> Response:
    """One folder, with its path from the root folder down to it (for breadcrumbs)."""
    folder = await metadata.get_folder_body(principal.organization_id, folder_id, request_id=rid)
    return Response(folder, media_type="application/json")


@router.patch(
    "/{folder_id}",
    response_model=FolderOut,
    responses=errors(404, 409, 415),
    openapi_extra=needs("folders:write"),
)
async def update_folder(
    folder_id: str, body: FolderUpdate, principal: PrincipalDep, metadata: MetadataDep, rid: RequestIdDep
) -> Response:
    """Rename and/or move a folder, and/or set its default expiry (one transaction); never into
    its own subtree."""
    changes = body.changes()
    if not changes:
        raise invalid("Send 'name', 'parentId' or 'expiryDays'.", field="body")
    folder = await metadata.update_folder(principal.organization_id, folder_id, changes, request_id=rid)
    return Response(folder, media_type="application/json")


@router.delete(
    "/{folder_id}", response_model=Success, responses=errors(404), openapi_extra=needs("folders:write")
)
async def delete_folder(
    folder_id: str, principal: PrincipalDep, metadata: MetadataDep, rid: RequestIdDep
) -> Any:
    """Delete a folder and all its subfolders; their assets move to root."""
    return await metadata.delete_folder(principal.organization_id, folder_id, request_id=rid)
