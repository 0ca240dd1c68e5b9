"""blob's upload pipeline in process, for A/B runs of a change to it on a shared machine.

    uv run --frozen --no-sync python bench/pipeline.py [--uploads 3] [--dir /tmp]

Runs ``coffer_blob.uploads._Upload`` (what ``POST /internal/v1/uploads`` runs) over a 100 MiB
``multipart/form-data`` stream of 256 KiB pieces, a fresh bytes object each as a socket
gives, into ``FsStorage`` under ``--dir`` (put it on the data disk), and prints each upload's
wall seconds and the process's CPU seconds (every thread: the loop's parsing, hashing,
writing). No HTTP, no other process: on a loaded machine its CPU figure holds where rates
through the whole stack do not. For an A/B, run it alternately with ``PYTHONPATH`` naming
another checkout's ``services/blob/src`` (A) and without (B), each run a fresh process.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio

from coffer_blob import uploads
from coffer_blob.storage.fs import FsStorage

SIZE = 100 * 1024 * 1024
PIECE = 256 * 1024
BOUNDARY = "benchpipelineboundary0123"
HEAD = (
    f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n'
    "Content-Type: application/octet-stream\r\n\r\n"
).encode()
TAIL = f"\r\n--{BOUNDARY}--\r\n".encode()


async def body(payload: bytes) -> AsyncIterator[bytes]:
    yield HEAD
    sent = 0
    while sent < SIZE:
        n = min(PIECE, SIZE - sent)
        yield bytes(payload[:n])  # a new object per piece, as the socket's reads are
        sent += n
        await anyio.sleep(0)  # let the writer and hasher tasks run, as between reads
    yield TAIL


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench/pipeline.py", description=__doc__.splitlines()[0])
    parser.add_argument("--uploads", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    payload = os.urandom(PIECE)
    root = Path(tempfile.mkdtemp(prefix="coffer-pipeline-", dir=args.dir))
    try:
        storage = FsStorage(root)
        for i in range(args.uploads):
            upload = uploads._Upload(
                storage,
                "org_" + "0" * 26,
                f"ast_01JBENCH{i:018d}",
                f"multipart/form-data; boundary={BOUNDARY}",
            )
            cpu, wall = time.process_time(), time.perf_counter()
            stored = anyio.run(upload.run, body(payload))
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            assert stored.size == SIZE
            print(f"upload {i + 1}: {wall:.3f} s wall ({SIZE / wall / 1e6:.0f} MB/s), {cpu:.3f} s CPU")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
