"""Image transforms (CONTRACT §10, issue 26) over real processes, on both backends: the whole
flow once (edge's signed URL with a transform, a preset on a public URL, an organization's own
preset, the variants gone with the asset, also when the sweeper finishes the delete), one
render for 20 concurrent requests (blob's metric), and memory: a PNG header claiming
20,000×20,000 refused without decoding, and 50 concurrent variants of a 24 MP JPEG answered
200 or 503 with blob's processes (the CDN and its workers) within the configured bound. The
rules the CDN enforces alone (order of checks, tampering, fmt=auto, orientation, 415, the
queue's 503, COFFER_TRANSFORMS=off) are tested in process on both drivers
(services/blob/tests/test_cdn_transforms.py)."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qsl, urlencode

import httpx
import pytest
import pyvips

from coffer_testkit.store import stored_objects
from coffer_testkit.testing import PeakRss, assert_error, rss_bytes, tree_rss_bytes

pytestmark = pytest.mark.e2e
# A first transform starts the workers; on a loaded machine that takes seconds.
TIMEOUT = 60
MIB = 1024 * 1024
PRESET_SECONDS = 5.0  # the CDN's preset cache (CdnTuning.preset_cache_seconds)


def jpeg(width: int, height: int) -> bytes:
    # Noise, so the JPEG is as large as a photograph of that size and decoding is real work.
    image = pyvips.Image.gaussnoise(width, height, mean=128, sigma=40).cast("uchar")
    return bytes(image.bandjoin([image, image]).jpegsave_buffer(Q=85))


def decode(data: bytes) -> pyvips.Image:
    return pyvips.Image.new_from_buffer(data, "")


def png_header_only(width: int, height: int) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = chunk(b"IDAT", zlib.compress(b"\0" * 16))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + idat + chunk(b"IEND", b"")


def blob_metric(stack: Any, name: str) -> float:
    text = httpx.get(stack.url("blob") + "/metrics").text
    match = re.search(rf"^{name} ([0-9.e+]+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def signed(api: httpx.Client, asset_id: str, **params: Any) -> str:
    response = api.get(f"/api/assets/{asset_id}/url", params={"expiresIn": 600, **params})
    assert response.status_code == 200, response.text
    return response.json()["url"]  # type: ignore[no-any-return]


def test_the_whole_flow(stack, tenant) -> None:
    api = tenant.api
    asset = api.post("/api/assets", files={"file": ("beach.jpg", jpeg(1600, 1200), "image/jpeg")}).json()
    public = asset["publicUrl"]

    thumb = httpx.get(public, params={"preset": "thumb"}, timeout=TIMEOUT)
    assert thumb.status_code == 200, thumb.text
    assert thumb.headers["content-type"] == "image/webp"
    assert (decode(thumb.content).width, decode(thumb.content).height) == (256, 256)
    assert thumb.headers["content-disposition"] == "inline; filename*=UTF-8''beach.webp"
    assert thumb.headers["cache-control"].startswith("public")
    assert_error(httpx.get(public, params={"w": "300"}), 400, "invalid_transform")

    url = signed(api, asset["id"], w=300, fmt="png")
    response = httpx.get(url, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    assert (decode(response.content).width, decode(response.content).height) == (300, 225)
    assert response.headers["content-type"] == "image/png"
    base, query = url.split("?")
    tampered = {**dict(parse_qsl(query)), "w": "3000"}
    assert_error(httpx.get(f"{base}?{urlencode(tampered)}"), 403, "forbidden")
    for bad in ({"w": "0"}, {"fmt": "gif"}, {"preset": "nope"}, {"preset": "thumb", "w": "10"}, {"q": "5"}):
        assert_error(api.get(f"/api/assets/{asset['id']}/url", params=bad), 400, "invalid_transform")

    # An organization's own preset: on public URLs within the CDN's cache time, and signed.
    put = api.put("/api/transform-presets/hero", json={"w": 500, "fmt": "jpeg", "q": 70})
    assert put.status_code == 200, put.text
    expected = {"name": "hero", "builtIn": False, "w": 500, "h": None, "fit": "cover", "fmt": "jpeg", "q": 70}
    assert put.json() == expected
    names = [p["name"] for p in api.get("/api/transform-presets").json()["presets"]]
    assert names == ["thumb", "small", "medium", "large", "hero"]
    deadline = time.monotonic() + PRESET_SECONDS
    while (hero := httpx.get(public, params={"preset": "hero"}, timeout=TIMEOUT)).status_code != 200:
        assert hero.status_code == 400 and time.monotonic() < deadline, hero.text
        time.sleep(0.1)
    assert decode(hero.content).width == 500
    assert hero.headers["content-type"] == "image/jpeg"
    assert httpx.get(signed(api, asset["id"], preset="hero"), timeout=TIMEOUT).content == hero.content
    assert api.put("/api/transform-presets/thumb", json={"w": 1}).status_code == 400

    # 20 concurrent requests for a new variant: one render, the same bytes for all.
    fresh = signed(api, asset["id"], w=333, fmt="webp")
    computed = blob_metric(stack, "coffer_transform_variants_computed_total")
    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda u: httpx.get(u, timeout=TIMEOUT), [fresh] * 20))
    assert {a.status_code for a in answers} == {200}
    assert len({a.content for a in answers}) == 1
    assert blob_metric(stack, "coffer_transform_variants_computed_total") == computed + 1

    # Deleting the asset: every variant answers 404.
    variants = [f"{public}?preset=thumb", f"{public}?preset=hero", url, fresh]
    assert api.delete(f"/api/assets/{asset['id']}").json() == {"success": True}
    for variant in variants:
        assert_error(httpx.get(variant), 404, "not_found")
    assert api.delete("/api/transform-presets/hero").json() == {"success": True}
    assert_error(api.get("/api/transform-presets/hero"), 404, "not_found")


def test_a_header_claiming_20000_by_20000_is_refused_without_decoding(stack, tenant) -> None:
    api = tenant.api
    warm = api.post("/api/assets", files={"file": ("w.jpg", jpeg(64, 64), "image/jpeg")}).json()
    # The workers started: their start is not what is measured.
    assert httpx.get(warm["publicUrl"], params={"preset": "small"}, timeout=TIMEOUT).status_code == 200
    asset = api.post("/api/assets", files={"file": ("huge.png", png_header_only(20_000, 20_000))}).json()
    blob = stack.processes["blob"].pid
    before = tree_rss_bytes(blob)
    with PeakRss({"blob": blob}) as rss:
        response = httpx.get(asset["publicUrl"], params={"preset": "thumb"}, timeout=TIMEOUT)
    after = tree_rss_bytes(blob)
    assert_error(response, 422, "image_too_large")
    growth = max(rss.growth()["blob"], (after - before) / MIB)
    print(f"blob RSS growth for a 20,000×20,000 header: {growth:.1f} MiB")
    assert growth < 64


WORKERS, WORKER_MB = 2, 384  # blob's defaults


# The workers' memory bound, whatever store the image comes from: the embedded default only.
@pytest.mark.parametrize("backend", ["embedded"], indirect=True, scope="session")
def test_50_concurrent_variants_of_a_24_mp_jpeg_stay_within_the_bound(own_stack_with, admin_for) -> None:
    own = own_stack_with(
        COFFER_CDN_TRANSFORM_WORKERS=str(WORKERS),
        COFFER_CDN_TRANSFORM_WORKER_MEMORY_MB=str(WORKER_MB),
        COFFER_CDN_TRANSFORM_QUEUE="8",
    )
    admin = admin_for(own)
    org = admin("create-org", "--name", "Big")["id"]
    key = admin("create-key", "--org", org)["key"]
    with httpx.Client(base_url=own.edge_url, headers={"x-api-key": key}, timeout=120) as api:
        source = jpeg(6000, 4000)
        asset = api.post("/api/assets", files={"file": ("big.jpg", source, "image/jpeg")}).json()
        # From thumbnails (shrunk while decoding) to 2060 wide (decoded at 3000×2000).
        urls = [signed(api, asset["id"], w=100 + 40 * i, fmt="webp") for i in range(50)]
        blob = own.processes["blob"].pid
        base = rss_bytes(blob)  # no worker yet: they start with the first transform
        bound = base + (WORKERS * WORKER_MB) * MIB
        peak = 0
        with ThreadPoolExecutor(50) as pool:
            futures = [pool.submit(httpx.get, url, timeout=60) for url in urls]
            while not all(f.done() for f in futures):
                peak = max(peak, tree_rss_bytes(blob))
                time.sleep(0.02)
        answers = [f.result() for f in futures]
    statuses = [a.status_code for a in answers]
    assert set(statuses) <= {200, 503}, statuses
    assert statuses.count(200) >= 1  # the rest may wait past 10 s on a loaded machine: 503
    for answer in answers:
        if answer.status_code == 503:
            assert_error(answer, 503, "unavailable")
            assert int(answer.headers["retry-after"]) >= 1
        else:
            image = decode(answer.content)
            assert image.width in range(100, 2100) and image.get("vips-loader") == "webpload_buffer"
    reasons = sorted({a.json()["error"]["message"] for a in answers if a.status_code == 503})
    print(
        f"24 MP × 50 ({reasons}): {statuses.count(200)} × 200, {statuses.count(503)} × 503; "
        f"blob + workers peak {peak / MIB:.0f} MiB, bound {bound / MIB:.0f} MiB "
        f"(CDN {base / MIB:.0f} + {WORKERS} × {WORKER_MB})"
    )
    assert peak < bound


def test_the_sweeper_finishes_a_delete_with_every_variant(own_stack, admin_for) -> None:
    """blob down during a delete: the asset is gone (tombstone), its bytes and variants stay until
    the sweeper finishes the tombstone, which removes them all."""
    admin = admin_for(own_stack)
    org = admin("create-org", "--name", "Swept")["id"]
    key = admin("create-key", "--org", org)["key"]
    with httpx.Client(base_url=own_stack.edge_url, headers={"x-api-key": key}, timeout=TIMEOUT) as api:
        asset = api.post("/api/assets", files={"file": ("p.jpg", jpeg(800, 600), "image/jpeg")}).json()
        variants = [f"{asset['publicUrl']}?preset={name}" for name in ("thumb", "small")]
        for variant in variants:
            assert httpx.get(variant, timeout=TIMEOUT).status_code == 200
        assert len(stored_objects(own_stack, org)[asset["id"]]) >= 3  # the original and two variants
        own_stack.kill("blob")
        assert_error(api.delete(f"/api/assets/{asset['id']}"), 503, "unavailable")
        own_stack.start("blob")
        assert asset["id"] in stored_objects(own_stack, org)  # the tombstone's bytes are still there
        sweep = subprocess.run(
            [sys.executable, "-m", "coffer_edge.cli", "sweep", "--intent-age", "0", "--tombstone-age", "0"],
            env=own_stack.env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        assert json.loads(sweep.stdout)["tombstones"] == 1, sweep.stdout
    assert asset["id"] not in stored_objects(own_stack, org)
    for variant in variants:
        assert_error(httpx.get(variant, timeout=TIMEOUT), 404, "not_found")
