"""blob's internal API besides uploads: deleting objects and prefixes, visibility, signing CDN URLs."""

from __future__ import annotations

import math
import time

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from coffer_blob import keys, signing
from coffer_blob.deps import SettingsDep, StorageDep
from coffer_kit.errors import invalid, not_found
from coffer_kit.urls import asset_prefix, public_url
from coffer_kit.wire import Deleted, SignIn, SignOut, VisibilityIn, VisibilityOut

router = APIRouter(prefix="/internal/v1")


@router.delete("/objects/{key:path}")
async def delete_object(key: str, storage: StorageDep) -> Deleted:
    """Delete one object; deleting a missing one succeeds too."""
    if not keys.is_valid_key(key):
        raise invalid("Not a storage key.", field="key")
    await run_in_threadpool(storage.delete, key)
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
    """A signed CDN URL for ``key``, valid for at least ``expiresIn`` seconds."""
    if not keys.is_valid_key(body.key):
        raise invalid("Not a storage key.", field="key")
    assert settings.signing_secret is not None
    expires = math.ceil(time.time()) + body.expires_in
    signature = signing.signature(settings.signing_secret.get_secret_value().encode(), body.key, expires)
    url = f"{public_url(settings.cdn_url, body.key)}?expires={expires}&signature={signature}"
    return SignOut(url=url, expires=expires)
