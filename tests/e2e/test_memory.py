"""Streaming: edge and blob stay small while a 100 MiB file goes up and comes back down."""

from __future__ import annotations

import hashlib

import httpx
import pytest

from coffer_kit.contract.urls import MAX_FILE_BYTES
from coffer_testkit.testing import PeakRss, multipart_stream, pattern_chunks

pytestmark = pytest.mark.e2e
MIB = 1024 * 1024


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
