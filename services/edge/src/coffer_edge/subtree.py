"""Keys confined to a folder subtree (issue 46), as edge checks them itself: whether a folder
lies in a subtree, and whether a made key's folder still lies in its makers' (metadata answers
the rest, from the ``coffer-subtree`` header)."""

from __future__ import annotations

from collections.abc import Sequence

from coffer_edge.actor import confine_to
from coffer_edge.clients.auth import Principal
from coffer_edge.clients.metadata import MetadataClient
from coffer_edge.clients.upload_tokens import UploadTokenClient
from coffer_kit.contract.errors import CofferError, not_found


async def confine(
    metadata: MetadataClient,
    org_id: str,
    folder_id: str | None,
    within: Sequence[str],
    *,
    request_id: str,
) -> bool:
    """Confine the request to the subtree of ``folder_id`` (None: the whole organization), the
    folder of a key (or of the key behind an upload token), if that folder still lies in the
    subtree of each of ``within``, the folders of the keys that made that key. False, and
    nothing confined, when it does not: moved out of a maker's subtree, the folder is no longer
    the maker's, nor any key's it made (within edge's cache bound, as a key's own answer)."""
    if (
        folder_id is not None
        and within
        and not await metadata.inside_all(org_id, folder_id, tuple(within), request_id=request_id)
    ):
        return False
    confine_to(folder_id)
    return True


async def confine_token(
    metadata: MetadataClient,
    org_id: str,
    folder_id: str | None,
    within: Sequence[str],
    *,
    request_id: str,
) -> None:
    """An upload token's request (or its resumable upload's), confined as the key behind it
    (``confine``); 404 when that key reaches nothing, as when the token's folder left the key's
    subtree (docs/api.md, "Keys made by keys": the token is not spent)."""
    if not await confine(metadata, org_id, folder_id, within, request_id=request_id):
        raise not_found("The upload token's folder is out of its key's reach.")


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
