"""The trash's protocols in edge (issue 47): who may do what, and the order of the store's and
metadata's steps.

- Trash: the store holds the object back first (the CDN answers 404 at once, signed or not:
  the trash's hold, a flag apart from the scan's of issue 48, so a scan that ends meanwhile
  releases only its own), then metadata moves the row to the trash. A definite refusal from
  metadata gives the hold back if the asset is still live; an unknown outcome leaves it held
  (never more reachable than metadata says).
- Restore: metadata first (the row back, its size reserved), then the store sets the scan's
  hold if the mode of the moment holds the file (``scan_held``: the mode may have become
  ``block`` while it was in the trash, where the mode's sync never looks), releases the
  trash's hold, and the scan's too unless the asset's scan keeps it (``keeps_held``: infected,
  pending, or unscanned under ``block``; an object trashed before the two holds were apart
  carries the trash's as the scan's). A failure in between is finished by restoring again (metadata
  answers a live asset).
- Both end by settling the trash's hold (``settle_hold``): a restore and a delete of one asset
  at once can reach the store in the other order than metadata (a late release undid the
  delete's hold: a trashed asset served).
- Purge (one, a batch, the sweeper's, the trash's bound): metadata turns rows into tombstones,
  then the objects are deleted, then the tombstones: the delete protocol's last two steps, so
  the sweeper finishes whatever a crash interrupted.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from coffer_edge.clients.auth import Principal
from coffer_edge.clients.blob import BlobClient
from coffer_edge.clients.metadata import MetadataClient
from coffer_kit.contract.errors import CofferError, forbidden
from coffer_kit.contract.resources import Asset
from coffer_kit.contract.wire import PurgedRef, TrashActIn, TrashIn

log = logging.getLogger("coffer.edge.trash")
T = TypeVar("T")


def may_administer(principal: Principal) -> bool:
    """Organization keys and owners' personal keys: permanent deletes, emptying the trash,
    the retention setting."""
    return principal.key_kind == "organization" or principal.role == "owner"


def require_admin(principal: Principal, what: str) -> None:
    if not may_administer(principal):
        raise forbidden(f"Only organization keys and owners' keys may {what}.")


def acting_user(principal: Principal) -> str | None:
    """A member's user id (a member acts only on what they trashed); None for everyone else."""
    return None if may_administer(principal) else principal.user_id


def scan_held(scan_status: str | None, scan_mode: str) -> bool:
    """Whether an object is held back for its scan: infected under any mode; not passed yet
    (``pending``, ``unscanned``) under ``block``."""
    return scan_status == "infected" or (scan_mode == "block" and scan_status in ("pending", "unscanned"))


def keeps_held(scan_status: str | None, scan_mode: str) -> bool:
    """Whether a restored asset's object stays held back for its scan (issue 48): infected; under
    ``block`` not passed yet; and under any mode still pending, since blob holds an infected
    object before metadata has the result (its scan's next round releases a clean one)."""
    return scan_status in ("infected", "pending") or (scan_mode == "block" and scan_status == "unscanned")


async def delete_refs(
    refs: list[PurgedRef], metadata: MetadataClient, blob: BlobClient, rid: str | None
) -> int:
    """The objects of purged or deleted assets, then their tombstones; what fails is left to the
    sweeper (the tombstone stays). Answers how many finished."""
    done = 0
    for ref in refs:
        try:
            await blob.delete_object(ref.key, request_id=rid or "")
            await metadata.finish_delete(ref.asset_id, request_id=rid)
            done += 1
        except CofferError as exc:
            log.warning(
                "purge deferred to the sweeper", extra={"asset_id": ref.asset_id, "error": exc.message}
            )
    return done


# Store writes of one ``settle`` before it leaves the store to the change that moved metadata last.
SETTLE_ROUNDS = 4


async def live(metadata: MetadataClient, org_id: str, asset_id: str, rid: str) -> bool:
    """Whether metadata has the asset live now (not trashed, not deleted)."""
    try:
        await metadata.get_asset(org_id, asset_id, request_id=rid)
    except CofferError as exc:
        if 400 <= exc.status < 500:
            return False
        raise
    return True


async def settle(
    read: Callable[[], Awaitable[T | None]], write: Callable[[T], Awaitable[None]], written: T | None
) -> None:
    """Make the store say what metadata says (``read``; None: nothing to settle), again while
    metadata moves.

    ``written``: what this change last wrote to the store after its own metadata write (None:
    nothing yet). Every change that writes metadata ends here, with a store write after its
    metadata write and then a read of metadata that agrees with it: so the last write to the
    store is followed by a read that agrees with it, and a change of metadata after that read
    settles again itself. Whatever order two requests (or two edge replicas) interleave in,
    the store ends as metadata does (at most ``SETTLE_ROUNDS`` writes each)."""
    for _ in range(SETTLE_ROUNDS):
        now = await read()
        if now is None or now == written:
            return
        await write(now)
        written = now


async def settle_hold(
    org_id: str,
    key: str,
    asset_id: str,
    metadata: MetadataClient,
    blob: BlobClient,
    rid: str,
    *,
    written: bool | None,
) -> None:
    """Settle the store's trash hold: held while the asset is not live in metadata."""

    async def held() -> bool:
        return not await live(metadata, org_id, asset_id, rid)

    async def hold(value: bool) -> None:
        await blob.set_held(key, value, request_id=rid, reason="trash")

    await settle(held, hold, written)


async def trash_asset(
    org_id: str,
    asset_id: str,
    *,
    retention_days: int,
    limit_bytes: int,
    metadata: MetadataClient,
    blob: BlobClient,
    rid: str,
) -> None:
    """Move an asset to the trash (see the module's docstring)."""
    before = await metadata.get_asset(org_id, asset_id, request_id=rid)  # 404 / 403 first
    await blob.set_held(before.key, True, request_id=rid, reason="trash")
    try:
        trashed = await metadata.trash_asset(
            org_id, asset_id, TrashIn(retention_days=retention_days, limit_bytes=limit_bytes), request_id=rid
        )
    except CofferError as exc:
        if 400 <= exc.status < 500:  # given back if still live (another request may have trashed it)
            with contextlib.suppress(CofferError):
                await settle_hold(org_id, before.key, asset_id, metadata, blob, rid, written=True)
        raise
    await settle_hold(org_id, before.key, asset_id, metadata, blob, rid, written=None)
    await delete_refs(trashed.purged, metadata, blob, rid)


async def restore_asset(
    org_id: str,
    asset_id: str,
    *,
    quota_bytes: int,
    only_user: str | None,
    scan_mode: str,
    metadata: MetadataClient,
    blob: BlobClient,
    rid: str,
) -> bytes:
    """Restore a trashed asset; the public body of the asset."""
    body = TrashActIn(only_user=only_user, quota_bytes=quota_bytes)
    answer = await metadata.restore(org_id, asset_id, body, request_id=rid)
    asset = Asset.model_validate_json(answer)
    if scan_held(asset.scanStatus, scan_mode):
        # Before the trash's hold is lifted: the mode may have become ``block`` while the file
        # was in the trash, where the mode's sync (live files only) never saw it.
        await blob.set_held(asset.key, True, request_id=rid)
    await blob.set_held(asset.key, False, request_id=rid, reason="trash")
    if not keeps_held(asset.scanStatus, scan_mode):
        await blob.set_held(asset.key, False, request_id=rid)
    await settle_hold(org_id, asset.key, asset_id, metadata, blob, rid, written=False)
    return answer


async def purge_asset(
    org_id: str, asset_id: str, *, only_user: str | None, metadata: MetadataClient, blob: BlobClient, rid: str
) -> None:
    ref = await metadata.purge(org_id, asset_id, TrashActIn(only_user=only_user), request_id=rid)
    await delete_refs([ref], metadata, blob, rid)


async def purge_batch(org_id: str, metadata: MetadataClient, blob: BlobClient, rid: str) -> tuple[int, int]:
    """One batch of emptying the trash: (purged, remaining)."""
    batch = await metadata.purge_batch(org_id, request_id=rid)
    await delete_refs(batch.refs, metadata, blob, rid)
    return batch.purged, batch.remaining
