"""The scan relay (issue 48): runs the malware scans metadata queued with each upload.

Who runs the scan job, and why edge (docs/architecture.md): the queue lives in metadata (a
pending asset, committed with its upload) and the bytes in blob's store, and only edge calls
other services. So, as the audit relay does with the outbox, edge claims due scans from
metadata (each leased for the scan's timeout, so a relay that died gives them back), asks
blob to stream each object to clamd (blob holds an infected object, releases a clean one,
before it answers), and reports the result to metadata, which records it with its
``asset.scanned`` / ``asset.infected`` events in one transaction. A scan blob cannot run
(clamd down, unset, too slow) is retried after ``backoff × 2^attempt`` seconds, at most
``retries`` times, then reported ``unscanned``: never silently passed. Several edges only
share the queue (claims are leases).
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress

from prometheus_client import Counter, Gauge

from coffer_edge.clients.blob import BlobClient
from coffer_edge.clients.metadata import MetadataClient
from coffer_edge.relay import Relay
from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.wire import ScanJob, ScanReport

log = logging.getLogger("coffer.edge.scans")

SCAN_RESULTS = Counter(
    "coffer_scan_results_total",
    "Malware scans ended, by status (clean, infected, unscanned), and retries.",
    ["status"],
)
# How long edge waits for blob's answer to one scan: blob's own bound
# (COFFER_BLOB_SCAN_TIMEOUT_SECONDS, default 120 s) and a margin.
SCAN_TIMEOUT_SECONDS = 150.0
SCAN_QUEUE = Gauge("coffer_scan_queue_depth", "Pending malware scans, as the last claim counted them.")


class ScanRelay(Relay):
    name = "scan relay"

    def __init__(
        self,
        metadata: MetadataClient,
        blob: BlobClient,
        *,
        interval: float,
        retries: int,
        backoff: float,
        concurrency: int,
        timeout: float,
    ) -> None:
        super().__init__(interval=interval, log=log)
        self.metadata = metadata
        self.blob = blob
        self.retries = retries
        self.backoff = backoff
        self.concurrency = concurrency
        # blob's own timeout bounds a scan; this one is for blob itself, a little longer.
        self.timeout = timeout

    async def once(self) -> int:
        """Claim and run the due scans until none is due; answers how many ran."""
        ran = 0
        while True:
            claimed = await self.metadata.claim_scans(limit=self.concurrency, lease_seconds=self.timeout + 30)
            SCAN_QUEUE.set(claimed.pending)
            if not claimed.jobs:
                return ran
            await asyncio.gather(*(self._run(job) for job in claimed.jobs))
            ran += len(claimed.jobs)

    async def _run(self, job: ScanJob) -> None:
        try:
            outcome = await self.blob.scan(job.key, timeout=self.timeout)
        except CofferError as exc:
            if exc.status == 404:  # deleted meanwhile: nothing to scan, nothing to report
                with suppress(CofferError):
                    await self.metadata.report_scan(
                        job.organization_id, job.asset_id, ScanReport(status="unscanned")
                    )
                return
            report = self._failed(job, exc)
        else:
            # The column's bound: a signature name past it is cut, never a report refused
            # (the asset would stay pending, claimed again and again).
            signature = outcome.signature[:255] if outcome.signature else outcome.signature
            report = ScanReport(status=outcome.result, signature=signature)
        try:
            await self.metadata.report_scan(job.organization_id, job.asset_id, report)
        except CofferError as exc:
            # The lease runs out and the scan is claimed again: at least once.
            log.warning("could not record a scan", extra={"asset_id": job.asset_id, "error": exc.message})
            return
        SCAN_RESULTS.labels(report.status).inc()

    def _failed(self, job: ScanJob, exc: CofferError) -> ScanReport:
        if job.attempts >= self.retries:
            log.warning(
                "malware scan failed after retries; unscanned",
                extra={"asset_id": job.asset_id, "error": exc.message},
            )
            return ScanReport(status="unscanned")
        delay = self.backoff * 2**job.attempts
        log.info(
            "malware scan failed; retrying",
            extra={"asset_id": job.asset_id, "delay": delay, "error": exc.message},
        )
        return ScanReport(status="retry", retry_seconds=delay)
