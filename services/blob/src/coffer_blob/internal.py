"""blob's internal API besides uploads: deleting objects and prefixes, signing CDN URLs."""

from __future__ import annotations

import math
import time

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr
from starlette.concurrency import run_in_threadpool

from coffer_blob import keys, signing
from coffer_blob.deps import SettingsDep, StorageDep
from coffer_kit.errors import invalid
from coffer_kit.urls import public_url

router = APIRouter(prefix="/internal/v1")

MAX_EXPIRES_IN = 7 * 24 * 3600  # CONTRACT §5: 1 to 604800 seconds


class SignIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    key: StrictStr = Field(max_length=2048)
    expires_in: StrictInt = Field(alias="expiresIn", ge=1, le=MAX_EXPIRES_IN)


class SignOut(BaseModel):
    url: str
    expires: int


@router.delete("/objects/{key:path}")
async def delete_object(key: str, storage: StorageDep) -> dict[str, bool]:
    """Delete one object; deleting a missing one succeeds too."""
    if not keys.is_valid_key(key):
        raise invalid("Not a storage key.", field="key")
    await run_in_threadpool(storage.delete, key)
    return {"deleted": True}


@router.delete("/prefixes/{org_id}/{asset_id}")
async def delete_prefix(org_id: str, asset_id: str, storage: StorageDep) -> dict[str, bool]:
    """Delete everything stored for one asset, unfinished uploads included; idempotent."""
    if not keys.valid_ids(org_id, asset_id):
        raise invalid("Not an organization id and asset id.", field="path")
    await run_in_threadpool(storage.delete_prefix, keys.asset_prefix(org_id, asset_id))
    return {"deleted": True}


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
