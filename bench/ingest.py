"""Safe ingest's costs (issue 48), in process, on a shared machine: blob's upload pipeline with
media type detection on and off in the same run, and clamd's scan throughput.

    uv run --frozen --no-sync python bench/ingest.py [--rounds 6] [--small 300] [--dir /tmp] [--scan-only]

Runs ``coffer_blob.uploads._Upload`` (what ``POST /internal/v1/uploads`` runs) into
``FsStorage`` under ``--dir``: 4 KiB uploads (``--small`` per round) and 100 MiB uploads (one
per round), alternating detection on and off round by round so the machine's load falls on
both alike. "Off" replaces ``coffer_blob.detect.detect`` with a function answering
``application/octet-stream`` at once, which is what the pipeline cost before detection. The
ratio is on ÷ off of the median rate. Only blob's share is timed: through the whole stack
(edge, metadata, the HTTP hops) the same absolute cost is a smaller fraction.

Then the scan throughput: a clamd started here (coffer_testkit.clamd: its own configuration,
the EICAR test signature as its database) scans a 100 MiB object read from the store, as
``coffer_blob.scan`` does (clamav-client's INSTREAM), three times; MB/s of the median.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio

from coffer_blob import detect, scan, uploads
from coffer_blob.config import Settings
from coffer_blob.storage.fs import FsStorage
from coffer_testkit.clamd import running_clamd

BIG = 100 * 1024 * 1024
SMALL = 4096
PIECE = 256 * 1024
BOUNDARY = "benchingestboundary0123"
HEAD = (
    f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="f.bin"\r\n'
    "Content-Type: application/octet-stream\r\n\r\n"
).encode()
TAIL = f"\r\n--{BOUNDARY}--\r\n".encode()
ORG = "org_" + "0" * 26


async def body(payload: bytes, size: int) -> AsyncIterator[bytes]:
    yield HEAD
    sent = 0
    while sent < size:
        n = min(PIECE, size - sent)
        yield bytes(payload[:n])  # a new object per piece, as the socket's reads are
        sent += n
        await anyio.sleep(0)
    yield TAIL


def upload_rate(storage: FsStorage, payload: bytes, size: int, count: int, tag: str) -> float:
    """Uploads per second of ``count`` uploads of ``size`` bytes, one after another."""
    started = time.perf_counter()
    for i in range(count):
        upload = uploads._Upload(
            storage, ORG, f"ast_01JBENCH{tag}{i:012d}"[:30], f"multipart/form-data; boundary={BOUNDARY}"
        )
        stored = anyio.run(upload.run, body(payload, size))
        assert stored.size == size
    return count / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench/ingest.py", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--small", type=int, default=300)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--scan-only", action="store_true", help="only the scan throughput")
    args = parser.parse_args()
    payload = os.urandom(PIECE)
    real = detect.detect
    off: Callable[[bytes], str] = lambda _head: detect.UNKNOWN  # noqa: E731
    rates: dict[tuple[str, str], list[float]] = {}
    root = Path(tempfile.mkdtemp(prefix="coffer-ingest-", dir=args.dir))
    try:
        storage = FsStorage(root)
        for r in range(0 if args.scan_only else args.rounds):
            for mode in ("on", "off") if r % 2 == 0 else ("off", "on"):
                detect.detect = real if mode == "on" else off  # type: ignore[assignment]
                tag = f"{r:02d}{mode}"
                rates.setdefault(("4 KiB", mode), []).append(
                    upload_rate(storage, payload, SMALL, args.small, tag)
                )
                rates.setdefault(("100 MiB", mode), []).append(
                    upload_rate(storage, payload, BIG, 1, tag + "b")
                )
                shutil.rmtree(root / "objects", ignore_errors=True)
        detect.detect = real  # type: ignore[assignment]
        print("| upload | detection on (/s) | off (/s) | on ÷ off |")
        print("|---|---|---|---|")
        for size in ("4 KiB", "100 MiB") if rates else ():
            on, off_ = statistics.median(rates[(size, "on")]), statistics.median(rates[(size, "off")])
            unit = on * (BIG / 1e6) if size == "100 MiB" else on
            print(
                f"| {size} | {on:.1f} | {off_:.1f} | {on / off_:.3f} |"
                + (f" ({unit:.0f} MB/s on)" if size == "100 MiB" else "")
            )

        key = f"{ORG}/ast_01JBENCHSCAN000000000000000/big.bin"
        writer = storage.open_writer(key)
        for _ in range(BIG // PIECE):
            writer.write(payload)
        writer.commit(content_type="application/octet-stream", sha256="0" * 64)
        with running_clamd(Path(tempfile.mkdtemp(prefix="coffer-clamd-", dir=args.dir))) as clamd:
            settings = Settings(data_dir=root / "data", blob_clamd_url=clamd.url)
            seconds = []
            for _ in range(3):
                started = time.perf_counter()
                found = scan._scan(storage, settings, key)
                seconds.append(time.perf_counter() - started)
                assert found is not None and found[0]["stream"][0] == "OK"
        throughput = BIG / 1e6 / statistics.median(seconds)
        spread = ", ".join(f"{BIG / 1e6 / s:.0f}" for s in seconds)
        print(f"| scan, 100 MiB through clamd (INSTREAM) | {throughput:.0f} MB/s ({spread}) | | |")
        print(f"load average after: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    finally:
        detect.detect = real  # type: ignore[assignment]
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
