"""The scrub's I/O bound (issue 47): bytes a second it reads, against the bound it was given.

A store on the filesystem driver in a temp dir (objects written through the driver, as
uploads write them), its manifest, then the scrub hashing every object at each bound; the
achieved rate is the bytes hashed over the run's wall time (walk included). The bound holds
when the ratio is at most 1 (plus one 1 MiB chunk over the run: the limiter lets the first
chunk through at once). The unbounded row is the machine's own hashing speed, for scale.

    uv run python bench/scrub.py [--objects 48] [--size-mib 1] [--out bench/results/scrub.md]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from coffer_blob.scrub import Expected, RateLimit, scrub
from coffer_blob.storage.fs import FsStorage
from coffer_kit.contract.ids import ASSET, ORG, new_id

MIB = 1024 * 1024
BOUNDS_MIB = (4, 16, 64)
UNBOUNDED = 10 * 1024 * MIB  # the setting's ceiling: far above what one core hashes


def make_store(root: Path, objects: int, size: int) -> tuple[FsStorage, dict[str, Expected]]:
    storage = FsStorage(root)
    org = new_id(ORG)
    manifest: dict[str, Expected] = {}
    for _ in range(objects):
        asset = new_id(ASSET)
        data = os.urandom(size)
        key = f"{org}/{asset}/file.bin"
        writer = storage.open_writer(key)
        writer.write(data)
        sha = hashlib.sha256(data).hexdigest()
        writer.commit(content_type="application/octet-stream", sha256=sha)
        manifest[f"{org}/{asset}"] = Expected(org, asset, key, size, sha, "asset")
    return storage, manifest


def run(storage: FsStorage, manifest: dict[str, Expected], bound: int) -> tuple[int, float, float]:
    """(bytes hashed, wall seconds, bytes a second)."""
    limit = RateLimit(bound)
    started = time.monotonic()
    report = scrub(storage, manifest, verify=1.0, limit=limit, orphan_age=timedelta(hours=1))
    seconds = time.monotonic() - started
    assert report.clean, report.human()
    return report.verified_bytes, seconds, report.verified_bytes / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=48)
    parser.add_argument("--size-mib", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    size = int(args.size_mib * MIB)
    rows = [
        "| bound (MiB/s) | hashed (MiB) | seconds | achieved (MiB/s) | achieved / bound |",
        "|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory(prefix="coffer-scrub-bench-") as tmp:
        storage, manifest = make_store(Path(tmp), args.objects, size)
        run(storage, manifest, UNBOUNDED)  # warm the page cache: every row reads from memory alike
        for bound_mib in (*BOUNDS_MIB, None):
            bound = UNBOUNDED if bound_mib is None else bound_mib * MIB
            hashed, seconds, rate = run(storage, manifest, bound)
            ratio = "—" if bound_mib is None else f"{rate / bound:.3f}"
            label = "unbounded" if bound_mib is None else str(bound_mib)
            rows.append(f"| {label} | {hashed / MIB:.0f} | {seconds:.2f} | {rate / MIB:.1f} | {ratio} |")
    table = "\n".join(rows)
    print(table)
    if args.out:
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        header = (
            f"# The scrub's I/O bound (bench/scrub.py)\n\n{args.objects} objects of {args.size_mib} MiB "
            f"on the filesystem driver, every object hashed, page cache warm; {when}, "
            f"{os.cpu_count()} cores.\n\n"
        )
        args.out.write_text(header + table + "\n")


if __name__ == "__main__":
    main()
