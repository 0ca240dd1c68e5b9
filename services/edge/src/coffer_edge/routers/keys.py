"""``/api/keys`` (issue 46): keys managed by keys, and what the calling key may do.

auth applies the owners' rules and refuses a key that could do more than its maker (actions,
networks, expiry); the folder subtree is checked here, against metadata, before auth is asked.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path
from starlette.convertors import Convertor, register_url_convertor

from coffer_edge.clients.auth import AuthClient, Principal
from coffer_edge.clients.metadata import MetadataClient
from coffer_edge.deps import EdgeState, MetadataDep, PrincipalDep, RequestIdDep, needs
from coffer_edge.routers.webhooks import JSONBodyRoute
from coffer_edge.schemas import KeySelf, Success, errors
from coffer_edge.subtree import folder_within
from coffer_kit.contract import scopes
from coffer_kit.contract.accounts import KeyCreatedOut, KeyOut, KeyRotatedOut, KeysOut
from coffer_kit.contract.errors import CofferError, not_found
from coffer_kit.contract.timeutil import isoformat
from coffer_kit.contract.wire import KeyCreate, KeyRotate
from coffer_kit.state import from_state


class KeyIdConvertor(Convertor[str]):
    """A key id in a path (``key_…``): ``/api/keys/self`` is never taken for one, so its
    405 lists GET alone."""

    regex = "key_[^/]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("key_id", KeyIdConvertor())

# A body that is sent must be JSON; rotate takes none (its grace then defaults to 0).
router = APIRouter(prefix="/api/keys", tags=["keys"], route_class=JSONBodyRoute)
AuthDep = Annotated[AuthClient, Depends(from_state(EdgeState, lambda state: state.auth))]
StateDep = Annotated[EdgeState, Depends(from_state(EdgeState, lambda state: state))]
KeyId = Annotated[str, Path(max_length=64, pattern=r"^key_[^/]+$", description="The key's id (`key_…`).")]


async def _visible(key: KeyOut, principal: Principal, metadata: MetadataClient, rid: str) -> bool:
    """A subtree key sees the keys of its subtree only."""
    if principal.folder_id is None:
        return True
    if key.folder_id is None:
        return False
    return await folder_within(
        metadata, principal.organization_id, key.folder_id, principal.folder_id, request_id=rid
    )


async def described(keys: list[KeyOut], org_id: str, metadata: MetadataClient, rid: str) -> list[KeyOut]:
    """The keys with their scopes in words, their folder named by its path ("can upload into
    /avatars"): auth knows the folder's id only."""
    paths: dict[str, str] = {}
    for folder_id in {k.folder_id for k in keys if k.folder_id}:
        try:
            folder = await metadata.get_folder(org_id, folder_id, request_id=rid)
        except CofferError as exc:
            if exc.status not in (403, 404):
                raise
            continue
        paths[folder_id] = "/" + "/".join(step.name for step in folder.path)
    return [
        k.model_copy(
            update={
                "description": scopes.describe(
                    k.actions, folder=paths.get(k.folder_id, k.folder_id), networks=k.networks
                )
            }
        )
        if k.folder_id
        else k
        for k in keys
    ]


@router.get("/self", response_model=KeySelf, responses=errors(), openapi_extra=needs(scopes.ANY_KEY))
async def key_self(principal: PrincipalDep, metadata: MetadataDep, rid: RequestIdDep) -> Any:
    """What the calling key may do: its scopes, actions, subtree, networks and expiry (any key)."""
    folder_path: str | None = None
    if principal.folder_id is not None:
        try:
            folder = await metadata.get_folder(principal.organization_id, principal.folder_id, request_id=rid)
            folder_path = "/" + "/".join(step.name for step in folder.path)
        except CofferError as exc:
            if exc.status not in (403, 404):
                raise
    networks = [str(n) for n in principal.networks]
    return KeySelf(
        id=principal.key_id,
        kind=principal.key_kind,
        organizationId=principal.organization_id,
        userId=principal.user_id,
        scopes=list(principal.scopes),
        actions=scopes.ordered(principal.actions),
        folderId=principal.folder_id,
        folderPath=folder_path,
        networks=networks,
        expiresAt=isoformat(datetime.fromtimestamp(principal.key_expires_at, UTC))
        if principal.key_expires_at
        else None,
        description=scopes.describe(
            principal.actions, folder=folder_path or principal.folder_id, networks=networks
        ),
    )


@router.get("", response_model=KeysOut, responses=errors(), openapi_extra=needs("keys:manage"))
async def list_keys(principal: PrincipalDep, auth: AuthDep, metadata: MetadataDep, rid: RequestIdDep) -> Any:
    """The keys the calling key may manage, newest first (never their secrets)."""
    listed = await auth.list_keys(principal.organization_id, principal.key_id, request_id=rid)
    visible = [k for k in listed.keys if await _visible(k, principal, metadata, rid)]
    return KeysOut(keys=await described(visible, principal.organization_id, metadata, rid))


@router.post(
    "",
    status_code=201,
    response_model=KeyCreatedOut,
    responses=errors(404, 409, 415),
    openapi_extra=needs("keys:manage"),
)
async def create_key(
    body: KeyCreate, principal: PrincipalDep, auth: AuthDep, metadata: MetadataDep, rid: RequestIdDep
) -> Any:
    """Make a key no more able than the calling one; the answer holds its secret, shown only now."""
    if not body.folder_id:  # omitted or empty: the caller's subtree, if any
        body = body.model_copy(update={"folder_id": principal.folder_id})
    elif not await folder_within(
        metadata, principal.organization_id, body.folder_id, principal.folder_id, request_id=rid
    ):
        raise not_found(f"Folder {body.folder_id} does not exist.")
    made = await auth.create_key(principal.organization_id, principal.key_id, body, request_id=rid)
    (key,) = await described([made.api_key], principal.organization_id, metadata, rid)
    return made.model_copy(update={"api_key": key})


async def _get(
    key_id: str, principal: Principal, auth: AuthClient, metadata: MetadataClient, rid: str
) -> KeyOut:
    key = await auth.get_key(principal.organization_id, principal.key_id, key_id, request_id=rid)
    if not await _visible(key, principal, metadata, rid):
        raise not_found(f"Key {key_id} does not exist.")
    return (await described([key], principal.organization_id, metadata, rid))[0]


@router.get(
    "/{key_id:key_id}", response_model=KeyOut, responses=errors(404), openapi_extra=needs("keys:manage")
)
async def get_key(
    key_id: KeyId, principal: PrincipalDep, auth: AuthDep, metadata: MetadataDep, rid: RequestIdDep
) -> Any:
    """One key."""
    return await _get(key_id, principal, auth, metadata, rid)


@router.delete(
    "/{key_id:key_id}", response_model=Success, responses=errors(404), openapi_extra=needs("keys:manage")
)
async def delete_key(
    key_id: KeyId, principal: PrincipalDep, state: StateDep, metadata: MetadataDep, rid: RequestIdDep
) -> Any:
    """Delete a key: every edge refuses it, and the CDN the signed URLs it made, within 5 seconds."""
    await _get(key_id, principal, state.auth, metadata, rid)
    await state.auth.delete_key(principal.organization_id, principal.key_id, key_id, request_id=rid)
    state.authority_ended()
    return {"success": True}


@router.post(
    "/{key_id:key_id}/rotate",
    status_code=201,
    response_model=KeyRotatedOut,
    responses=errors(404, 415),
    openapi_extra=needs("keys:manage"),
)
async def rotate_key(
    key_id: KeyId,
    principal: PrincipalDep,
    auth: AuthDep,
    metadata: MetadataDep,
    rid: RequestIdDep,
    body: KeyRotate | None = None,
) -> Any:
    """A new secret for a key, with the same name, kind, scopes, subtree, networks and lifetime;
    the old one works ``graceSeconds`` more (default 0)."""
    await _get(key_id, principal, auth, metadata, rid)
    return await auth.rotate_key(
        principal.organization_id, principal.key_id, key_id, body or KeyRotate(), request_id=rid
    )
