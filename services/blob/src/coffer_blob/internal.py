"""blob's internal API besides uploads: deleting objects and prefixes, visibility, signing CDN URLs,
revoking the signed URLs of an authority, and organizations' transform presets."""

from __future__ import annotations

import math
import time
from urllib.parse import urlencode

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from coffer_blob import grants, signing
from coffer_blob.config import Settings
from coffer_blob.deps import SettingsDep, StorageDep
from coffer_blob.transforms import presets
from coffer_kit.contract import keys, transforms
from coffer_kit.contract.errors import invalid, not_found
from coffer_kit.contract.ids import is_org_id
from coffer_kit.contract.urls import asset_prefix, public_url
from coffer_kit.contract.wire import (
    MAX_REVOCATIONS,
    Deleted,
    GrantRevocations,
    RevocationsStored,
    SignIn,
    SignOut,
    TransformFields,
    TransformPresets,
    VisibilityIn,
    VisibilityOut,
)

router = APIRouter(prefix="/internal/v1")

# The bound of a request body on the internal listener (coffer_blob.main): room for a full
# batch of grant revocations, about 150 bytes of JSON an entry (edge's; 256 allowed).
REVOCATIONS_BODY_BYTES = 256 * MAX_REVOCATIONS


@router.delete("/objects/{key:path}")
async def delete_object(key: str, storage: StorageDep) -> Deleted:
    """Delete one asset's object and every variant kept beside it (CONTRACT §10); deleting a
    missing one succeeds too.

    The original goes first: from then on no new variant can be made (the CDN checks the
    original after storing one and removes it if the original is gone), so deleting the
    asset's prefix next leaves nothing behind, whichever of the two a crash interrupts (the
    caller retries, as edge's sweeper does with tombstones)."""
    if not keys.is_valid_key(key):
        raise invalid("Not a storage key.", field="key")
    await run_in_threadpool(storage.delete, key)
    await run_in_threadpool(storage.delete_prefix, key.rsplit("/", 1)[0] + "/")
    return Deleted()


@router.put("/visibility/{key:path}")
async def set_visibility(key: str, body: VisibilityIn, storage: StorageDep) -> VisibilityOut:
    """Make an object private or public (CONTRACT §12); the CDN sees it on its next read.

    edge orders this against metadata's commit so that a crash never leaves a private asset
    public: the store first when making private, metadata first when making public."""
    if not keys.is_valid_key(key):
        raise invalid("Not a storage key.", field="key")
    if not await run_in_threadpool(storage.set_private, key, body.visibility == "private"):
        raise not_found("No such object.")
    return VisibilityOut(key=key, visibility=body.visibility)


@router.delete("/prefixes/{org_id}/{asset_id}")
async def delete_prefix(org_id: str, asset_id: str, storage: StorageDep) -> Deleted:
    """Delete everything stored for one asset, unfinished uploads included; idempotent."""
    if not keys.valid_ids(org_id, asset_id):
        raise invalid("Not an organization id and asset id.", field="path")
    await run_in_threadpool(storage.delete_prefix, asset_prefix(org_id, asset_id))
    return Deleted()


@router.post("/sign")
async def sign(body: SignIn, settings: SettingsDep) -> SignOut:
    """A signed CDN URL for ``key``, valid for at least ``expiresIn`` seconds; with ``by``, it
    also dies when that authority is revoked (``coffer_blob.grants``)."""
    if not keys.is_valid_key(body.key):
        raise invalid("Not a storage key.", field="key")
    query = _transform_query(body)
    now = time.time()
    expires = math.ceil(now) + body.expires_in
    secret = _secret(settings)
    by = ""
    if body.by is not None:
        org_id = body.key.split("/", 1)[0]
        by = signing.by_value(signing.grant_tag(secret, org_id, body.by), int(now))
    signature = signing.signature(secret, body.key, expires, transforms.signed_spec(query), by)
    signed = urlencode({**query, "expires": expires, **({"by": by} if by else {}), "signature": signature})
    url = f"{public_url(settings.cdn_url, body.key)}?{signed}"
    return SignOut(url=url, expires=expires)


@router.post("/grant-revocations")
async def store_revocations(
    body: GrantRevocations, settings: SettingsDep, storage: StorageDep
) -> RevocationsStored:
    """Refuse, from now on, the signed URLs each authority made in its organization at or before
    its ``revokedAt``; idempotent (edge relays auth's queue at least once)."""
    await grants.store(storage, _secret(settings), body.revocations, now=time.time())
    return RevocationsStored(stored=len(body.revocations))


def _secret(settings: Settings) -> bytes:
    assert settings.signing_secret is not None
    return settings.signing_secret.get_secret_value().encode()


def _transform_query(body: SignIn) -> dict[str, str]:
    """The transform's URL parameters (CONTRACT §10), checked; {} for the original."""
    if body.preset is not None and body.transform is not None:
        raise transforms.invalid_transform_both()
    if body.preset is not None:
        return {"preset": body.preset}
    if body.transform is not None:
        return transforms.preset_from_fields(body.transform.model_dump()).query()
    return {}


def _org(org_id: str) -> str:
    if not is_org_id(org_id):
        raise invalid("Not an organization id.", field="org_id")
    return org_id


@router.get("/transform-presets/{org_id}")
async def list_presets(org_id: str, storage: StorageDep) -> TransformPresets:
    """The organization's own transform presets."""
    found = await run_in_threadpool(presets.read, storage, _org(org_id))
    fields = {name: TransformFields(**transform.fields()) for name, transform in sorted(found.items())}
    return TransformPresets(presets=fields)


@router.put("/transform-presets/{org_id}/{name}")
async def put_preset(org_id: str, name: str, body: TransformFields, storage: StorageDep) -> TransformFields:
    """Create or replace one preset (at most 20 per organization: 409 past that)."""
    transform = transforms.preset_from_fields(body.model_dump())
    await run_in_threadpool(presets.put, storage, _org(org_id), transforms.check_preset_name(name), transform)
    return TransformFields(**transform.fields())


@router.delete("/transform-presets/{org_id}/{name}")
async def delete_preset(org_id: str, name: str, storage: StorageDep) -> Deleted:
    """Remove one preset; 404 if the organization has none of that name."""
    if not await run_in_threadpool(presets.delete, storage, _org(org_id), name):
        raise not_found(f"There is no transform preset {name!r}.")
    return Deleted()
