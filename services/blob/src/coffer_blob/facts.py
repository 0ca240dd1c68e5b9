"""``POST /internal/v1/facts/{key}``: an image's facts (issue 50): its size as shown, its EXIF
orientation and a BlurHash placeholder, read on a transform worker (the transforms' header
check, time and memory limits: coffer_blob.transforms.worker.facts). edge's facts relay asks
this for each image metadata queued at upload, and reports the answer back to metadata.

A file that is not an image the transforms read answers all nulls, never an error; an object
that is gone answers 404 (the asset was deleted meanwhile).
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from coffer_blob.deps import blob_state
from coffer_kit.contract import keys
from coffer_kit.contract.errors import invalid, not_found
from coffer_kit.contract.wire import ImageFactsOut

router = APIRouter(prefix="/internal/v1")


@router.post("/facts/{key:path}")
async def image_facts(key: str, request: Request) -> ImageFactsOut:
    if not keys.is_valid_key(key):
        raise invalid("Not an object key.", field="key")
    pool = blob_state(request).transforms
    if pool is None:  # transforms switched off (COFFER_TRANSFORMS=off): no facts either
        return ImageFactsOut()
    outcome = await pool.facts(key)
    if outcome[0] == "gone":
        raise not_found(f"No object {key}.")
    if outcome[0] != "ok":
        return ImageFactsOut()
    _, width, height, orientation, placeholder = outcome
    return ImageFactsOut(width=width, height=height, orientation=orientation, placeholder=placeholder)
