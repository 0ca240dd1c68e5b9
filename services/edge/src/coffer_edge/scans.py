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

Whether an object is held for its scan follows the asset's scan status and its organization's
scan mode (``scan_held``). An upload sets it by the mode at its start, and a scan's end by its
result; a change of the mode is a job auth keeps, which ``ScanModeRelay`` runs: once edge's
cached rules have caught up with the change (uploads follow them), every live asset of the
organization still ``pending`` or ``unscanned`` is held or released as the new mode says. A
scan's end and a sync each end on ``settle`` (coffer_edge.trash): the store is written, then
metadata and auth are read again until they agree with the last write. So a scan that ends
while a sync runs (a clean object released by blob, then held by the sync that read
``pending``) is set right by whichever of the two writes last (docs/architecture.md, "Who runs
the scan job").
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress

from prometheus_client import Counter, Gauge

from coffer_edge.clients.auth import AuthClient
from coffer_edge.clients.blob import BlobClient
from coffer_edge.clients.metadata import MetadataClient
from coffer_edge.relay import Relay
from coffer_edge.trash import scan_held, settle
from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.wire import ScanJob, ScanReport, ScanSync

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
SCAN_SYNCED = Counter(
    "coffer_scan_mode_synced_total",
    "Objects held or released again after their organization's scan mode changed.",
)
# A sync's page of assets, and how long a claimed sync is kept from other edges.
SYNC_PAGE = 500
SYNC_LEASE_SECONDS = 600.0


async def settle_held(
    metadata: MetadataClient,
    blob: BlobClient,
    auth: AuthClient,
    org_id: str,
    asset_id: str,
    key: str,
    *,
    mode: str | None,
) -> None:
    """Make the object's scan hold say what metadata's status and the mode say (``mode``: a
    sync's, which a change of it claims again; None: auth's, asked each round). An asset no
    longer live is left to the trash and the delete."""

    async def held() -> bool | None:
        try:
            asset = await metadata.get_asset(org_id, asset_id, request_id="")
        except CofferError as exc:
            if 400 <= exc.status < 500:
                return None
            raise
        scan = mode or (await auth.ingest(org_id, request_id="", fresh=True)).scan
        return scan_held(asset.scanStatus, scan)

    async def hold(value: bool) -> None:
        await blob.set_held(key, value, request_id="")

    await settle(held, hold, None)


class _ScanJobs(Relay):
    """A relay that holds and releases objects for their scans: the three services it calls."""

    def __init__(
        self, metadata: MetadataClient, blob: BlobClient, auth: AuthClient, *, interval: float
    ) -> None:
        super().__init__(interval=interval, log=log)
        self.metadata = metadata
        self.blob = blob
        self.auth = auth

    async def settle_held(self, org_id: str, asset_id: str, key: str, *, mode: str | None) -> None:
        await settle_held(self.metadata, self.blob, self.auth, org_id, asset_id, key, mode=mode)


class ScanModeRelay(_ScanJobs):
    """Runs the syncs auth keeps for changes of a scan mode, apart from the scans (a scan may
    take minutes, a sync of a large organization too)."""

    name = "scan mode relay"

    def __init__(
        self,
        metadata: MetadataClient,
        blob: BlobClient,
        auth: AuthClient,
        *,
        interval: float,
        settle_seconds: float,
    ) -> None:
        super().__init__(metadata, blob, auth, interval=interval)
        # Only changes this old: edge's cached rules, which its uploads follow, have caught up.
        self.settle_seconds = settle_seconds

    async def once(self) -> int:
        """Run the due syncs; answers how many ran. One that fails stays leased, and is claimed
        again when its lease runs out."""
        jobs = await self.auth.claim_scan_syncs(
            settle_seconds=self.settle_seconds, lease_seconds=SYNC_LEASE_SECONDS
        )
        for job in jobs:
            await self.sync(job)
        return len(jobs)

    async def sync(self, job: ScanSync) -> None:
        """Hold or release, as ``job.scan`` says, every live asset of the organization still
        pending or unscanned; then end the job (auth keeps it due if the mode changed since)."""
        after, synced, failed = "", 0, 0
        while page := await self.metadata.scan_holds(job.organization_id, after=after, limit=SYNC_PAGE):
            for asset in page:
                try:
                    await self.settle_held(job.organization_id, asset.asset_id, asset.key, mode=job.scan)
                except CofferError as exc:
                    # One object cannot stop the others: gone (deleted meanwhile, or lost, which
                    # the scrub reports) is skipped; a failure leaves the job due for a retry.
                    if exc.status != 404:
                        failed += 1
                        log.warning(
                            "could not settle a scan hold",
                            extra={"asset_id": asset.asset_id, "error": exc.message},
                        )
            synced += len(page)
            SCAN_SYNCED.inc(len(page))
            after = page[-1].asset_id
        if failed:  # leased still: claimed again when the lease runs out
            log.warning("scan mode sync incomplete", extra={"org_id": job.organization_id, "failed": failed})
            return
        ended = await self.auth.end_scan_sync(job)
        log.info(
            "scan mode synced",
            extra={"org_id": job.organization_id, "scan": job.scan, "assets": synced, "ended": ended},
        )


class ScanRelay(_ScanJobs):
    name = "scan relay"

    def __init__(
        self,
        metadata: MetadataClient,
        blob: BlobClient,
        auth: AuthClient,
        *,
        interval: float,
        retries: int,
        backoff: float,
        concurrency: int,
        timeout: float,
    ) -> None:
        super().__init__(metadata, blob, auth, interval=interval)
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
        if report.status != "retry":
            try:
                await self.settle_held(job.organization_id, job.asset_id, job.key, mode=None)
            except CofferError as exc:
                log.warning(
                    "could not settle a scan's hold", extra={"asset_id": job.asset_id, "error": exc.message}
                )

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
