"""Streaming: edge and blob stay small while a 100 MiB file goes up and comes back down."""

from __future__ import annotations

import hashlib
import threading
import time

import httpx
import pytest

from coffer_kit.urls import MAX_FILE_BYTES
from coffer_testkit.testing import multipart_stream, pattern_chunks, rss_bytes

pytestmark = pytest.mark.e2e
MIB = 1024 * 1024


class PeakRss:
    """Samples the RSS of some processes from /proc in a background thread."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.baseline = {name: rss_bytes(pid) for name, pid in pids.items()}
        self.peak = dict(self.baseline)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, pid in self.pids.items():
                self.peak[name] = max(self.peak[name], rss_bytes(pid))
            time.sleep(0.01)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def growth(self) -> dict[str, float]:
        return {name: (self.peak[name] - self.baseline[name]) / MIB for name in self.pids}


def test_rss_of_edge_and_blob_grows_less_than_32_mib(stack, tenant) -> None:
    # Warm both paths first so one-time allocations (imports, pools) are not counted.
    warm = tenant.api.post("/api/assets", files={"file": ("w.bin", b"w" * 100_000)}).json()
    httpx.get(warm["publicUrl"])
    pids = {"edge": stack.processes["edge"].pid, "blob": stack.processes["blob"].pid}
    expected = hashlib.sha256()
    for chunk in pattern_chunks(MAX_FILE_BYTES):
        expected.update(chunk)
    with PeakRss(pids) as rss:
        ctype, body = multipart_stream(size=MAX_FILE_BYTES, filename="big.bin")
        asset = tenant.api.post("/api/assets", content=body, headers={"content-type": ctype}).json()
        got = hashlib.sha256()
        with httpx.stream("GET", asset["publicUrl"], timeout=120) as response:
            assert response.status_code == 200
            for chunk in response.iter_bytes():
                got.update(chunk)
    assert got.hexdigest() == expected.hexdigest()
    growth = rss.growth()
    print(f"RSS growth during 100 MiB upload + download: {growth}")
    assert all(g < 32 for g in growth.values()), growth
