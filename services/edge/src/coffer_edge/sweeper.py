"""The sweeper: converges what crashes left half-done (docs/architecture.md, the upload and delete protocols).

- Upload intents older than a bound: metadata marks them swept (so they can no longer commit),
  blob deletes everything under the asset's prefix, metadata drops the intent.
- Tombstones: blob deletes the bytes, metadata drops the tombstone.
- Resumable uploads created through an upload token whose minting key was deleted, or whose
  user left the organization (auth answers which): terminated, so their bytes and reservations
  are released even if nobody calls on them again (issue 44; a request on such an upload's
  capability terminates it at once, ``routers/tus.py``).

Every step is idempotent, so several edges may sweep at once and a crash mid-sweep is harmless.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass

from coffer_edge.clients.auth import AuthClient
from coffer_edge.clients.blob import BlobClient
from coffer_edge.clients.metadata import MetadataClient
from coffer_edge.clients.upload_tokens import UploadTokenClient
from coffer_edge.metrics import EXPIRY_SWEEPS, SWEPT
from coffer_edge.trash import delete_refs, settle_hold
from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.wire import ExpiredRef, ExpireIn, MinterRef, PurgedRef

log = logging.getLogger("coffer.edge.sweeper")


@dataclass
class SweepResult:
    intents: int = 0
    tombstones: int = 0
    failed: int = 0
    uploads: int = 0


@dataclass
class ExpiryResult:
    expired: int = 0
    purged: int = 0
    failed: int = 0


# Unfinished uploads asked about per call to metadata, and minters per call to auth.
MINTED_BATCH = 200


async def sweep_minters(metadata: MetadataClient, blob: BlobClient, tokens: UploadTokenClient) -> SweepResult:
    """Terminate every unfinished upload whose capability's minter can no longer act: its
    upload row goes, then its bytes, then its intent (and so its reservation). One still being
    written (423) is left for the next round."""
    result = SweepResult()
    after = ""
    while True:
        page = (await metadata.tus_minted(after=after, limit=MINTED_BATCH)).uploads
        if not page:
            break
        refs = [
            MinterRef(
                organization_id=u.organization_id,
                key_id=u.minter_key_id,
                user_id=u.minter_user_id,
                token_id=u.token_id,
            )
            for u in page
        ]
        answer = await tokens.minters(refs)
        for upload, acting in zip(page, answer.acting, strict=True):
            if acting:
                continue
            try:
                ended = await metadata.tus_terminate(upload.id, upload.organization_id, request_id="")
                if ended is not None:
                    await blob.delete_prefix(upload.organization_id, ended.asset_id)
                    await metadata.finish_intent(ended.asset_id)
                result.uploads += 1
                SWEPT.labels("upload", "done").inc()
            except CofferError as exc:
                if exc.status != 404:
                    result.failed += 1
                    SWEPT.labels("upload", "failed").inc()
        if len(page) < MINTED_BATCH:
            break
        after = page[-1].id
    if result.uploads or result.failed:
        log.info("uploads of gone minters ended", extra={"uploads": result.uploads, "failed": result.failed})
    return result


async def sweep_once(
    metadata: MetadataClient,
    blob: BlobClient,
    *,
    intent_age: float,
    tombstone_age: float,
    batch: int = 100,
) -> SweepResult:
    """Sweep until nothing stale is left (or something fails)."""
    result = SweepResult()
    while True:
        todo = await metadata.sweep_candidates(
            intent_age=intent_age, tombstone_age=tombstone_age, limit=batch
        )
        for intent in todo.intents:
            try:
                await blob.delete_prefix(intent.organization_id, intent.asset_id)
                await metadata.finish_intent(intent.asset_id)
                result.intents += 1
                SWEPT.labels("intent", "done").inc()
            except CofferError:
                result.failed += 1
                SWEPT.labels("intent", "failed").inc()
        for stone in todo.tombstones:
            try:
                await blob.delete_object(stone.key)
                await metadata.finish_delete(stone.asset_id)
                result.tombstones += 1
                SWEPT.labels("tombstone", "done").inc()
            except CofferError:
                result.failed += 1
                SWEPT.labels("tombstone", "failed").inc()
        if result.failed or (len(todo.intents) < batch and len(todo.tombstones) < batch):
            break
    if result.intents or result.tombstones or result.failed:
        log.info(
            "sweep done",
            extra={"intents": result.intents, "tombstones": result.tombstones, "failed": result.failed},
        )
    return result


# Issue 47: expired assets and due purges handled per call to metadata.
EXPIRY_BATCH = 100
# The expiry sweeper's interval (COFFER_EDGE_EXPIRY_INTERVAL_SECONDS, for tests): with jitter
# at most 1.5 times this between two rounds, so an asset expires within two minutes.
EXPIRY_INTERVAL_SECONDS = 30.0


async def _expire(
    metadata: MetadataClient, blob: BlobClient, ref: ExpiredRef, *, days: int, limit: int
) -> None:
    """Expire one asset. With a trash the store holds the object back first; if metadata then
    refuses (4xx: a PATCH moved the expiry, or another edge expired it first), the hold is
    given back while the asset is still live (one gone since stays held); either way the hold
    is settled against metadata (coffer_edge.trash.settle_hold). An object the store lost (the
    scrub's "missing") has nothing to hold back: its asset is expired all the same (blob's 404
    was taken for another edge's expiry, and the row stayed first in every batch)."""
    org_id, asset_id = ref.organization_id, ref.asset_id
    held = None
    if days > 0:
        held = (await metadata.get_asset(org_id, asset_id, request_id="")).key
        try:
            await blob.set_held(held, True, request_id="", reason="trash")
        except CofferError as exc:
            if exc.status != 404:
                raise
            log.warning("expiring an asset whose object is missing", extra={"asset_id": asset_id})
            held = None
    try:
        done = await metadata.expire(org_id, asset_id, ExpireIn(retention_days=days, limit_bytes=limit))
    except CofferError as exc:
        if held is not None and 400 <= exc.status < 500:  # given back while it is still live
            await settle_hold(org_id, held, asset_id, metadata, blob, "", written=True)
        raise
    if held is not None:
        await settle_hold(org_id, held, asset_id, metadata, blob, "", written=None)
    refs = done.purged + ([PurgedRef(asset_id=asset_id, key=done.key)] if done.deleted else [])
    await delete_refs(refs, metadata, blob, None)


async def expire_once(metadata: MetadataClient, blob: BlobClient, auth: AuthClient) -> ExpiryResult:
    """Expire what is due (to the trash or deleted, per its organization's retention), then
    purge trashed assets past their retention. The store holds an object back before its row
    moves to the trash (coffer_edge.trash); a row another edge expired first, or no longer
    due, is 404, skipped."""
    result = ExpiryResult()
    while True:
        due = (await metadata.expired(limit=EXPIRY_BATCH)).assets
        if not due:
            break
        orgs = await auth.trash_retentions(sorted({d.organization_id for d in due}))
        for ref in due:
            days = orgs.retentions.get(ref.organization_id, 0)
            limit = orgs.quotas.get(ref.organization_id, 0)
            try:
                await _expire(metadata, blob, ref, days=days, limit=limit)
                result.expired += 1
                SWEPT.labels("expired", "done").inc()
            except CofferError as exc:
                if exc.status != 404:
                    result.failed += 1
                    SWEPT.labels("expired", "failed").inc()
        if result.failed or len(due) < EXPIRY_BATCH:
            break
    while True:
        refs = await metadata.purge_due(limit=EXPIRY_BATCH)
        result.purged += await delete_refs(refs, metadata, blob, None)
        if len(refs) < EXPIRY_BATCH:
            break
    if result.expired or result.purged or result.failed:
        log.info(
            "expiry done", extra={"expired": result.expired, "purged": result.purged, "failed": result.failed}
        )
    return result


async def expire_forever(
    metadata: MetadataClient, blob: BlobClient, auth: AuthClient, *, interval: float = EXPIRY_INTERVAL_SECONDS
) -> None:
    """Run ``expire_once`` every ``interval`` seconds (with jitter) until cancelled."""
    while True:
        await asyncio.sleep(interval * random.uniform(0.5, 1.5))
        try:
            await expire_once(metadata, blob, auth)
            EXPIRY_SWEEPS.labels("done").inc()
        except CofferError as exc:
            EXPIRY_SWEEPS.labels("failed").inc()
            log.warning("expiry sweep failed", extra={"error": exc.message})
        except Exception:
            EXPIRY_SWEEPS.labels("failed").inc()
            log.exception("expiry sweep crashed")


async def sweep_forever(
    metadata: MetadataClient,
    blob: BlobClient,
    *,
    interval: float,
    intent_age: float,
    tombstone_age: float,
    tokens: UploadTokenClient | None = None,
) -> None:
    """Sweep every ``interval`` seconds (with jitter, so replicas spread out) until cancelled."""
    while True:
        await asyncio.sleep(interval * random.uniform(0.5, 1.5))
        try:
            if tokens is not None:
                await sweep_minters(metadata, blob, tokens)
            await sweep_once(metadata, blob, intent_age=intent_age, tombstone_age=tombstone_age)
        except CofferError as exc:
            log.warning("sweep failed", extra={"error": exc.message})
        except Exception:
            log.exception("sweep crashed")
