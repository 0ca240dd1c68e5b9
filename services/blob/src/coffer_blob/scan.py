"""``POST /internal/v1/scan/{key}``: stream a stored object to clamd (INSTREAM) and say what it
found; ``PUT /internal/v1/held/{key}``: hold an object back from every download, or release it,
for its scan or for the trash (two holds of their own).

edge's scan relay (coffer_edge.scans) asks this for each pending scan it claimed from
metadata. The object is read from the store in chunks and streamed to clamd by
clamav-client's ``instream`` (a kept client of clamd's protocol), in a worker thread, at most
``COFFER_BLOB_SCAN_CONCURRENCY`` at once per process, each bounded by
``COFFER_BLOB_SCAN_TIMEOUT_SECONDS`` (the socket timeout of every read and write). The store
changes before the answer: an infected object is held (the CDN answers 404, signed or not),
a clean one released, so a crash after it only makes edge scan again.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
from clamav_client import clamd
from fastapi import APIRouter
from prometheus_client import Counter, Histogram
from starlette.concurrency import run_in_threadpool

from coffer_blob import archives
from coffer_blob.config import Settings
from coffer_blob.deps import SettingsDep, StorageDep
from coffer_blob.storage import Reader, Storage
from coffer_kit.contract import keys
from coffer_kit.contract.errors import CofferError, invalid, not_found
from coffer_kit.contract.wire import HeldIn, ScanOutcome

router = APIRouter(prefix="/internal/v1")

SCANS = Counter("coffer_scans_total", "Objects streamed to clamd, by result.", ["result"])
SCAN_SECONDS = Histogram(
    "coffer_scan_seconds",
    "Time to stream one object to clamd and read its answer.",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
SCAN_BYTES = Counter("coffer_scan_bytes_total", "Bytes streamed to clamd.")

_limiters: dict[int, anyio.CapacityLimiter] = {}


def scanner_unavailable(message: str) -> CofferError:
    """503 ``scanner_unavailable``: clamd could not be reached, refused, or took too long."""
    return CofferError(503, "scanner_unavailable", message, headers={"Retry-After": "5"})


def _limiter(settings: Settings) -> anyio.CapacityLimiter:
    # One per process and bound (made on first use, on the event loop that uses it).
    found = _limiters.get(settings.blob_scan_concurrency)
    if found is None:
        found = _limiters[settings.blob_scan_concurrency] = anyio.CapacityLimiter(
            settings.blob_scan_concurrency
        )
    return found


def client(settings: Settings) -> clamd.ClamdNetworkSocket:
    """clamav-client's socket for ``COFFER_BLOB_CLAMD_URL``."""
    url = settings.blob_clamd_url
    if url is None:
        raise scanner_unavailable("No malware scanner is configured (COFFER_BLOB_CLAMD_URL).")
    timeout = settings.blob_scan_timeout_seconds
    if url.startswith("unix://"):
        return clamd.ClamdUnixSocket(url, timeout=int(max(1, timeout)))
    host, _, port = url.removeprefix("tcp://").rpartition(":")
    return clamd.ClamdNetworkSocket(host, int(port), timeout=timeout)


class _ReaderFile:
    """A store reader as the file object ``instream`` reads (``read(n)``, n = 1 KiB there),
    counting bytes. A read answers at most what is left of the store's current chunk (up to
    1 MiB), sliced from it where it lies: joining and re-slicing a buffer per read copied the
    whole chunk a thousand times (2 MB/s)."""

    def __init__(self, reader: Reader) -> None:
        self.chunks = iter(reader)
        self.chunk = b""
        self.at = 0
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        if self.at >= len(self.chunk):
            self.chunk, self.at = next(self.chunks, b""), 0
        end = len(self.chunk) if n < 0 else self.at + n
        data = self.chunk[self.at : end]
        self.at += len(data)
        self.size += len(data)
        return data


# What clamd names a file it could not scan whole under AlertExceedsMax (an archive past
# MaxFiles, MaxScanSize, MaxFileSize or MaxRecursion): without that setting it says OK.
LIMITS_EXCEEDED = "Heuristics.Limits.Exceeded"


def _scan(storage: Storage, settings: Settings, key: str) -> tuple[dict[str, Any], int] | None:
    """In a worker thread: clamd's answer for the object, and its size; None if there is none.
    An archive clamd called clean but could not have read (coffer_blob.archives) is answered as
    clamd answers a file it could not scan whole."""
    reader = storage.open_reader(key)
    if reader is None:
        return None
    try:
        source = _ReaderFile(reader)
        try:
            found = dict(client(settings).instream(source))  # type: ignore[arg-type]
        except (clamd.ClamdError, OSError, ValueError) as exc:  # (ValueError: an answer not UTF-8)
            raise scanner_unavailable(f"The malware scanner failed: {exc}") from exc
    finally:
        reader.close()
    clean = found.get("stream", ("ERROR", None))[0] == "OK"
    if clean and (why := archives.unread(storage, key, source.size)):
        found["stream"] = ("FOUND", f"{LIMITS_EXCEEDED}.Coffer: {why}")
    return found, source.size


@router.post("/scan/{key:path}")
async def scan(key: str, storage: StorageDep, settings: SettingsDep) -> ScanOutcome:
    """Stream the object to clamd; hold it if infected, release it if clean."""
    if not keys.is_valid_key(key):
        raise invalid("Not a storage key.", field="key")
    started = time.perf_counter()
    try:
        answer = await anyio.to_thread.run_sync(_scan, storage, settings, key, limiter=_limiter(settings))
    except CofferError:
        SCANS.labels("unavailable").inc()
        raise
    if answer is None:
        raise not_found("No such object.")
    found, size = answer
    status, signature = found.get("stream", ("ERROR", None))
    if status == "FOUND" and str(signature).startswith(LIMITS_EXCEEDED):
        # clamd's AlertExceedsMax: it stopped before the end (files, size or depth of an
        # archive), so what it did not read may hold anything. Not a pass, nor a finding.
        SCANS.labels("unavailable").inc()
        raise scanner_unavailable(f"The malware scanner could not scan the whole file: {signature}.")
    if status == "FOUND":
        result = "infected"
    elif status == "OK":
        result = "clean"
    else:  # clamd could not scan it (a size limit, a broken archive): not a pass
        SCANS.labels("unavailable").inc()
        raise scanner_unavailable(f"The malware scanner could not scan the file: {signature or status}.")
    # The store first: an infected object is never served again, whatever happens next.
    if not await run_in_threadpool(storage.set_held, key, result == "infected"):
        raise not_found("No such object.")
    seconds = time.perf_counter() - started
    SCANS.labels(result).inc()
    SCAN_SECONDS.observe(seconds)
    SCAN_BYTES.inc(size)
    return ScanOutcome(result=result, signature=signature, size=size, seconds=seconds)


@router.put("/held/{key:path}")
async def set_held(key: str, body: HeldIn, storage: StorageDep) -> HeldIn:
    """Hold an object back from every download, or release it, for ``reason``: its scan (not
    passed yet under ``block``, or infected) or the trash; each reason a hold of its own."""
    if not keys.is_valid_key(key):
        raise invalid("Not a storage key.", field="key")
    if not await run_in_threadpool(storage.set_held, key, body.held, body.reason):
        raise not_found("No such object.")
    return body
