"""The sweeper: converges what crashes left half-done (docs/architecture.md, the upload and delete protocols).

- Upload intents older than a bound: metadata marks them swept (so they can no longer commit),
  blob deletes everything under the asset's prefix, metadata drops the intent.
- Tombstones: blob deletes the bytes, metadata drops the tombstone.

Every step is idempotent, so several edges may sweep at once and a crash mid-sweep is harmless.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass

from coffer_edge.clients.blob import BlobClient
from coffer_edge.clients.metadata import MetadataClient
from coffer_edge.metrics import SWEPT
from coffer_kit.errors import CofferError

log = logging.getLogger("coffer.edge.sweeper")


@dataclass
class SweepResult:
    intents: int = 0
    tombstones: int = 0
    failed: int = 0


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


async def sweep_forever(
    metadata: MetadataClient, blob: BlobClient, *, interval: float, intent_age: float, tombstone_age: float
) -> None:
    """Sweep every ``interval`` seconds (with jitter, so replicas spread out) until cancelled."""
    while True:
        await asyncio.sleep(interval * random.uniform(0.5, 1.5))
        try:
            await sweep_once(metadata, blob, intent_age=intent_age, tombstone_age=tombstone_age)
        except CofferError as exc:
            log.warning("sweep failed", extra={"error": exc.message})
        except Exception:
            log.exception("sweep crashed")
