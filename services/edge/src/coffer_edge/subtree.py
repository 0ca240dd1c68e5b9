"""Keys confined to a folder subtree (issue 46), as edge checks them itself: whether a folder
lies in a subtree (metadata answers the rest, from the ``coffer-subtree`` header)."""

from __future__ import annotations

from coffer_edge.clients.auth import Principal
from coffer_edge.clients.metadata import MetadataClient
from coffer_edge.clients.upload_tokens import UploadTokenClient
from coffer_kit.contract.errors import CofferError, not_found


async def folder_within(
    metadata: MetadataClient, org_id: str, folder_id: str, root: str | None, *, request_id: str
) -> bool:
    """Whether a folder exists and lies in the subtree of ``root`` (None: anywhere)."""
    try:
        folder = await metadata.get_folder(org_id, folder_id, request_id=request_id)
    except CofferError as exc:
        if exc.status in (403, 404):
            return False
        raise
    return root is None or any(step.id == root for step in folder.path)


async def require_token_inside(
    principal: Principal, token_id: str, tokens: UploadTokenClient, metadata: MetadataClient, rid: str
) -> None:
    """404 for an upload token whose uploads go outside a subtree key's subtree."""
    org = principal.organization_id
    place = await tokens.place(org, token_id, request_id=rid)
    if place.folder_id is None or not await folder_within(
        metadata, org, place.folder_id, principal.folder_id, request_id=rid
    ):
        raise not_found(f"Upload token {token_id} does not exist.")
