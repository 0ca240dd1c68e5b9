"""Bounds before work, over real processes (issue 23): a request that brings more than its
bound costs the process almost nothing, whoever sends it, with or without a key."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from coffer_testkit.testing import PeakRss, assert_error

pytestmark = pytest.mark.e2e
MIB = 1024 * 1024


def _json_array(total: int) -> Iterator[bytes]:
    """``[[],[],…]`` of ``total`` bytes, in 64 KiB pieces (no Content-Length: counted)."""
    piece = b"[]," * (64 * 1024 // 3)
    yield b"["
    sent = 1
    while sent + len(piece) < total:
        yield piece
        sent += len(piece)
    yield b"[]]"


def test_a_30_mib_json_body_without_a_key_costs_edge_nothing(stack) -> None:
    """It made edge grow by about 890 MiB, past its 512 Mi limit in the chart."""
    warm = httpx.post(f"{stack.edge_url}/api/folders", json={"name": "w"})
    assert_error(warm, 401, "unauthorized")
    with PeakRss({"edge": stack.processes["edge"].pid}) as rss:
        for headers in ({}, {"content-length": str(30 * MIB)}):
            try:
                answer = httpx.post(
                    f"{stack.edge_url}/api/folders",
                    content=_json_array(30 * MIB),
                    headers={"content-type": "application/json", **headers},
                    timeout=60,
                )
            except httpx.WriteError:  # refused from Content-Length and closed before it was sent
                continue
            assert_error(answer, 413, "body_too_large")
    assert rss.growth()["edge"] < 16, rss.growth()


def test_json_nested_10000_deep_is_a_400_not_a_500(tenant) -> None:
    deep = b'{"name": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    answer = tenant.api.post("/api/folders", content=deep, headers={"content-type": "application/json"})
    error = assert_error(answer, 400, "invalid_request")
    assert error["message"] == "The JSON body nests deeper than 32 levels."
    # Nothing was made, and the key still works.
    assert tenant.api.get("/api/folders").json() == {"folders": []}
