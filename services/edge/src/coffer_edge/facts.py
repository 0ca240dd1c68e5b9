"""The image facts relay (issue 50): computes the facts metadata queued with each image upload.

The same shape as the scan relay (coffer_edge.scans) and for the same reason: the queue lives
in metadata (an image committed with ``facts_due_at``), the bytes in blob's store, and only
edge calls other services. edge claims due images (each leased, so a relay that died gives
them back), asks blob to read each on a transform worker, and reports the facts to metadata,
which records them with an ``asset.updated`` event in one transaction. A failure (blob busy
or down) leaves the lease to run out: the image is claimed again, at least once. Never on an
upload's path: the upload only wakes the relay.
"""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import Counter

from coffer_edge.clients.blob import BlobClient
from coffer_edge.clients.metadata import MetadataClient
from coffer_edge.relay import Relay
from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.wire import FactsJob, ImageFactsOut

log = logging.getLogger("coffer.edge.facts")

FACTS = Counter(
    "coffer_image_facts_total", "Image facts computed, by outcome (image, none, failed).", ["outcome"]
)
# blob's own bound on one image (COFFER_CDN_TRANSFORM_TIMEOUT, 10 s) plus its wait for a
# worker (transforms.pool.FACTS_WAIT_SECONDS, 60 s), and a margin.
FACTS_TIMEOUT_SECONDS = 90.0
# Images read at once by this edge (blob bounds its workers itself).
CONCURRENCY = 2


class FactsRelay(Relay):
    name = "image facts relay"

    def __init__(self, metadata: MetadataClient, blob: BlobClient, *, interval: float) -> None:
        super().__init__(interval=interval, log=log)
        self.metadata = metadata
        self.blob = blob

    async def once(self) -> int:
        """Claim and compute the due facts until none is due; answers how many ran."""
        ran = 0
        while True:
            claimed = await self.metadata.claim_facts(
                limit=CONCURRENCY, lease_seconds=FACTS_TIMEOUT_SECONDS + 30
            )
            if not claimed.jobs:
                return ran
            await asyncio.gather(*(self._run(job) for job in claimed.jobs))
            ran += len(claimed.jobs)

    async def _run(self, job: FactsJob) -> None:
        try:
            facts = await self.blob.image_facts(job.key, timeout=FACTS_TIMEOUT_SECONDS)
        except CofferError as exc:
            if exc.status != 404:  # busy or down: the lease runs out and it is claimed again
                FACTS.labels("failed").inc()
                log.warning("image facts failed; retried later", extra={"asset_id": job.asset_id})
                return
            facts = ImageFactsOut()  # deleted meanwhile: end the job
        try:
            await self.metadata.report_facts(job.organization_id, job.asset_id, facts)
        except CofferError as exc:
            if exc.status != 404:
                log.warning("could not record image facts", extra={"asset_id": job.asset_id})
            return
        FACTS.labels("image" if facts.width is not None else "none").inc()
