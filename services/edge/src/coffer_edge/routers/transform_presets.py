"""``/api/transform-presets`` (CONTRACT §10): an organization's own image transform presets.

Members read; organization keys and owners write (as for the contract's other owner-only
routes, webhooks). blob keeps each as an object of its own in its store, where the CDN
reads them without calling another service (a new one at once, a change within 5 s). At most
20 per organization (409 past that); names never clash with the built-in ones.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path

from coffer_edge.actor import current_actor
from coffer_edge.clients.auth import AuthClient, Principal
from coffer_edge.deps import AuthDep, BlobDep, PrincipalDep, RequestIdDep, needs
from coffer_edge.routers.folders import JSONRoute
from coffer_edge.schemas import Success, TransformPreset, TransformPresetBody, TransformPresetList, errors
from coffer_kit.contract import transforms
from coffer_kit.contract.errors import CofferError, forbidden, invalid_transform, not_found
from coffer_kit.contract.ids import EVENT, new_id
from coffer_kit.contract.timeutil import isoformat, utcnow
from coffer_kit.contract.wire import TransformFields

log = logging.getLogger("coffer.edge.presets")


async def preset_admin(principal: PrincipalDep) -> Principal:
    """The caller, if it may change presets: an organization key, or an owner's personal key."""
    if principal.key_kind == "organization" or principal.role == "owner":
        return principal
    raise forbidden("Only organization keys and owners' keys change transform presets.")


AdminDep = Annotated[Principal, Depends(preset_admin)]
PresetName = Annotated[
    str, Path(description="A built-in preset's name or one of the organization's.", max_length=64)
]
# The organization's own: described exactly (pattern, not a built-in), checked by
# coffer_kit.contract.transforms.check_preset_name so that a bad one is 400 invalid_transform.
OwnPresetName = Annotated[
    str,
    Path(
        description="1 to 32 characters: a-z, 0-9, `-` and `_`, starting with a letter or digit; "
        "not a built-in preset's name.",
        json_schema_extra={
            "pattern": transforms.PRESET_NAME_PATTERN,
            "not": {"enum": list(transforms.BUILTIN_PRESETS)},
        },
    ),
]

router = APIRouter(prefix="/api/transform-presets", tags=["transform presets"])
json_router = APIRouter(prefix="/api/transform-presets", tags=["transform presets"], route_class=JSONRoute)


def _out(name: str, transform: transforms.Transform, *, built_in: bool) -> TransformPreset:
    return TransformPreset(name=name, builtIn=built_in, **transform.fields())


@router.get("", response_model=TransformPresetList, responses=errors(), openapi_extra=needs("urls:sign"))
async def list_presets(principal: PrincipalDep, blob: BlobDep, rid: RequestIdDep) -> Any:
    """The built-in presets, then the organization's own, by name."""
    own = await blob.transform_presets(principal.organization_id, request_id=rid)
    built_in = [_out(name, t, built_in=True) for name, t in transforms.BUILTIN_PRESETS.items()]
    mine = [TransformPreset(name=name, builtIn=False, **f.model_dump()) for name, f in own.presets.items()]
    return TransformPresetList(presets=built_in + mine)


@router.get(
    "/{name}", response_model=TransformPreset, responses=errors(404), openapi_extra=needs("urls:sign")
)
async def get_preset(name: PresetName, principal: PrincipalDep, blob: BlobDep, rid: RequestIdDep) -> Any:
    """One preset, built in or the organization's own."""
    if name in transforms.BUILTIN_PRESETS:
        return _out(name, transforms.BUILTIN_PRESETS[name], built_in=True)
    own = await blob.transform_presets(principal.organization_id, request_id=rid)
    fields = own.presets.get(name)
    if fields is None:
        raise not_found(f"There is no transform preset {name!r}.")
    return TransformPreset(name=name, builtIn=False, **fields.model_dump())


@json_router.put(
    "/{name}",
    response_model=TransformPreset,
    responses=errors(400, 409, 415),
    openapi_extra=needs("presets:manage"),
)
async def put_preset(
    name: OwnPresetName,
    body: TransformPresetBody,
    principal: AdminDep,
    blob: BlobDep,
    auth: AuthDep,
    rid: RequestIdDep,
) -> Any:
    """Create or replace one of the organization's presets; the body is the free parameters.

    ``preset=NAME`` then works on the organization's public URLs (within 5 s) and in
    ``GET /api/assets/:id/url``. At most 20 per organization (409); a built-in name or a bad
    parameter → 400 ``invalid_transform``.
    """
    transforms.check_preset_name(name)
    fields = TransformFields.model_validate(body.model_dump())
    transform = transforms.preset_from_fields(fields.model_dump())
    stored = await blob.put_transform_preset(
        principal.organization_id, name, TransformFields(**transform.fields()), request_id=rid
    )
    await _audit(
        auth, principal.organization_id, "preset.updated", name, stored.model_dump(exclude_none=True)
    )
    return TransformPreset(name=name, builtIn=False, **stored.model_dump())


@router.delete(
    "/{name}", response_model=Success, responses=errors(400, 404), openapi_extra=needs("presets:manage")
)
async def delete_preset(
    name: OwnPresetName, principal: AdminDep, blob: BlobDep, auth: AuthDep, rid: RequestIdDep
) -> Any:
    """Remove one of the organization's presets; built-in ones cannot be removed (400)."""
    if name in transforms.BUILTIN_PRESETS:
        raise invalid_transform(f"{name!r} is a built-in preset.", field="name")
    await blob.delete_transform_preset(principal.organization_id, name, request_id=rid)
    await _audit(auth, principal.organization_id, "preset.deleted", name, {})
    return Success(success=True)


async def _audit(auth: AuthClient, org_id: str, action: str, name: str, fields: dict[str, Any]) -> None:
    """The change in the organization's audit log, as metadata's changes reach it (auth's
    ``/audit/changes``), once blob has made it: blob holds presets, and no transaction spans
    the two. A log that cannot be written (auth down) loses the entry, never the change,
    and says so in edge's log."""
    actor = current_actor()
    if actor is None:
        return
    event = {
        "id": new_id(EVENT),
        "organizationId": org_id,
        "type": action,
        "createdAt": isoformat(utcnow()),
        "data": {"id": name, "name": name, **fields},
        "actor": actor.model_dump(by_alias=True, exclude_none=True),
    }
    try:
        await auth.record_changes([event])
    except CofferError as exc:
        log.warning("a preset change is not in the audit log", extra={"action": action, "error": str(exc)})
