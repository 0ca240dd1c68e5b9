"""The ``transforms`` group's tools (issue 26): test images, the CDN process's tree, its memory.

The CDN's transform workers are not the blob process's children but its fork server's
(``coffer_blob.transforms.pool``), so CPU and memory are read over the whole process tree.
"""

from __future__ import annotations

import http.client
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pyvips
from load import rss_bytes

from coffer_testkit.testing import descendants

# The thumb preset (CONTRACT §10): 256×256 cover, webp, quality 80.
THUMB = 256
THUMB_QUALITY = 80
# 12 MP and 24 MP, 4:3 and 3:2 as cameras make them.
SIZE_12MP = (4000, 3000)
SIZE_24MP = (6000, 4000)


def test_jpeg(width: int, height: int, *, seed: int) -> bytes:
    """A photo-like JPEG: a colour gradient under Gaussian noise (no two seeds alike), quality 90."""
    xy = pyvips.Image.xyz(width, height)
    red = xy[0] * (255 / width)
    green = xy[1] * (255 / height)
    blue = (red + green) / 2
    noise = pyvips.Image.gaussnoise(width, height, sigma=24, mean=0, seed=seed)
    image = (red.bandjoin([green, blue]) + noise).cast("uchar")
    return bytes(image.jpegsave_buffer(Q=90))


def bare_thumbnail_seconds(path: str, *, threads: int) -> float:
    """Wall time of the thumb preset done by pyvips in this process: thumbnail + webp encode."""
    pyvips.concurrency_set(threads)
    pyvips.cache_set_max(0)  # every call decodes the file afresh, as a first request does
    started = time.perf_counter()
    image = pyvips.Image.thumbnail(path, THUMB, height=THUMB, crop="centre", size="down")
    image.webpsave_buffer(Q=THUMB_QUALITY, keep=0)
    return time.perf_counter() - started


def timed_get(url: str) -> tuple[int, float, float, bytes]:
    """One GET on a new connection: status, seconds to the response's head, to its last byte."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=120)
    conn.connect()  # the connection is not what is measured
    try:
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        started = time.perf_counter()
        conn.request("GET", path)
        response = conn.getresponse()
        first = time.perf_counter() - started
        body = response.read()
        return response.status, first, time.perf_counter() - started, body
    finally:
        conn.close()


def get_until_served(url: str, deadline: float) -> tuple[int, int]:
    """GET until an answer other than 503, honouring ``Retry-After`` as a client would (or the
    deadline passes): the last status, and how many 503s it took."""
    parts = urlsplit(url)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    refused = 0
    while True:
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=120)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            response.read()
            status, retry = response.status, response.getheader("retry-after")
        finally:
            conn.close()
        if status != 503 or time.monotonic() > deadline:
            return status, refused
        refused += 1
        time.sleep(float(retry or 1))  # the client's back-off the answer asks for


def pss_bytes(pid: int) -> int:
    """Proportional set size: shared pages split among the processes sharing them."""
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        for line in fh:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


@dataclass
class TreeMemory:
    """Samples a process tree's summed VmRSS and PSS every ``interval`` (the tree re-read each
    time: workers start and are replaced); keeps the baseline, the peaks and the most processes."""

    root: int
    interval: float = 0.01
    baseline_rss: int = 0
    peak_rss: int = 0
    peak_pss: int = 0
    peak_child_rss: int = 0  # the largest one process other than the root (a worker)
    most_processes: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def read(self) -> tuple[int, int, int]:
        rss = pss = 0
        pids = descendants(self.root)
        for pid in pids:
            try:
                one = rss_bytes(pid)
                pss += pss_bytes(pid)
            except OSError:
                continue  # gone between the listing and the read
            rss += one
            if pid != self.root:
                self.peak_child_rss = max(self.peak_child_rss, one)
        return rss, pss, len(pids)

    def _run(self) -> None:
        while not self._stop.is_set():
            rss, pss, count = self.read()
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
            self.most_processes = max(self.most_processes, count)
            self._stop.wait(self.interval)

    def __enter__(self) -> TreeMemory:
        self.baseline_rss, self.peak_pss, self.most_processes = self.read()
        self.peak_rss = self.baseline_rss
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
