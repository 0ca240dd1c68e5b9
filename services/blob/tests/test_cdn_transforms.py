"""Image transforms on the CDN host (CONTRACT §10, issue 26), in process on both drivers: the
CDN hook's order of checks, the variant kept beside the original and found again, its headers,
deletion with the asset, the worker pool's single flight and its 503s.

Images are made here with libvips and every output is decoded to check its type and size.
Renders run in real worker processes (spawned by the pool, as in production).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import multiprocessing
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import boto3
import httpx
import pytest
import pyvips
from prometheus_client import REGISTRY

from coffer_blob.cdn import variant_key
from coffer_blob.config import CdnTuning, Settings
from coffer_blob.deps import BlobState
from coffer_blob.main import create_app, create_cdn_app
from coffer_blob.storage import make_storage
from coffer_blob.transforms import presets
from coffer_blob.transforms.worker import MAX_VARIANTS_PER_ASSET, MIN_VARIANT_BYTES, variant_budget
from coffer_kit.contract import transforms
from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.transforms import Transform
from coffer_kit.internal import INTERNAL_TOKEN_HEADER
from coffer_kit.state import state_of
from coffer_testkit.testing import app_client, assert_error

from .support import CDN_URL, END, MULTIPART, ORG, TOKEN, file_part, new_asset_id
from .test_cdn import key_path

pytestmark = [pytest.mark.anyio, pytest.mark.processes]  # real transform worker processes


@pytest.fixture(params=["fs", "s3"])
def settings(request: pytest.FixtureRequest) -> Settings:
    chosen: Settings = request.getfixturevalue("settings" if request.param == "fs" else "s3_settings")
    # One worker: every render of a test runs in the same process, started once.
    return chosen.model_copy(
        update={"cdn_transform_workers": 1, "cdn_tuning": CdnTuning(preset_cache_seconds=0.0)}
    )


@pytest.fixture
async def cdn(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_cdn_app(settings)
    async with app_client(app, CDN_URL) as client:
        yield client


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings)
    async with app_client(app, "http://blob.internal", {INTERNAL_TOKEN_HEADER: TOKEN}) as client:
        yield client


def jpeg(width: int = 1600, height: int = 1200) -> bytes:
    return bytes(pyvips.Image.black(width, height, bands=3).new_from_image([200, 100, 50]).jpegsave_buffer())


def sample(name: str, **labels: str) -> float:
    """A metric's current value in this process (the CDN app runs here)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


def decode(data: bytes) -> pyvips.Image:
    return pyvips.Image.new_from_buffer(data, "")


async def store(
    api: httpx.AsyncClient, data: bytes, *, filename: str = "photo.jpg", private: bool = False
) -> dict[str, Any]:
    query = "?visibility=private" if private else ""
    body = file_part(data, filename=filename, content_type="image/jpeg") + END
    response = await api.post(
        f"/internal/v1/uploads/{ORG}/{new_asset_id()}{query}",
        content=body,
        headers={"content-type": MULTIPART},
    )
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


async def signed(api: httpx.AsyncClient, key: str, **transform: Any) -> str:
    """The CDN path and query of a signed URL for ``key`` covering ``transform``."""
    body: dict[str, Any] = {"key": key, "expiresIn": 600}
    if "preset" in transform:
        body["preset"] = transform.pop("preset")
    if transform:
        body["transform"] = transform
    response = await api.post("/internal/v1/sign", json=body)
    assert response.status_code == 200, response.text
    url = urlsplit(response.json()["url"])
    return f"{url.path}?{url.query}"


def stored_names(settings: Settings, key: str) -> list[str]:
    """Everything the store holds for the asset of ``key`` (its original and its variants)."""
    org, asset, _ = key.split("/")
    if settings.storage == "fs":
        assert settings.blob_dir is not None
        return sorted(p.name for p in Path(settings.blob_dir, "objects", org).glob(f"*/{asset}[.%]*"))
    client = boto3.client(
        "s3",
        endpoint_url=settings.s3_endpoint_url,
        region_name=settings.s3_region,
    )
    listed = client.list_objects_v2(Bucket=settings.s3_bucket, Prefix=f"{org}/{asset}/")
    return sorted(item["Key"] for item in listed.get("Contents", []))


def kept_variants(settings: Settings, key: str) -> int:
    """How many variants the store keeps for the asset of ``key`` (its objects but the original;
    the file system driver's sidecars and temp files aside)."""
    objects = [n for n in stored_names(settings, key) if "%meta" not in n and "%tmp" not in n]
    return len(objects) - 1


async def test_a_preset_renders_once_then_is_found_again(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, settings: Settings
) -> None:
    key = (await store(api, jpeg(), filename="holiday photo.jpg"))["key"]
    computed = sample("coffer_transform_variants_computed_total")
    hits = sample("coffer_transform_cache_hits_total")
    first = await cdn.get(key_path(key) + "?preset=thumb")
    assert first.status_code == 200, first.text
    image = decode(first.content)
    assert (image.width, image.height) == (256, 256)
    assert image.get("vips-loader") == "webpload_buffer"
    h = first.headers
    assert h["content-type"] == "image/webp"
    assert h["etag"] == f'"{hashlib.sha256(first.content).hexdigest()}"'
    assert h["cache-control"].startswith("public, max-age=")
    assert h["access-control-allow-origin"] == "*"
    assert h["content-disposition"] == "inline; filename*=UTF-8''holiday%20photo.webp"
    assert "vary" not in h
    assert len(stored_names(settings, key)) > 1  # the variant is kept beside the original
    again = await cdn.get(key_path(key) + "?preset=thumb")
    assert again.content == first.content
    assert sample("coffer_transform_variants_computed_total") == computed + 1
    assert sample("coffer_transform_cache_hits_total") == hits + 1
    # Conditional requests work on variants as on originals.
    cached = await cdn.get(key_path(key) + "?preset=thumb", headers={"if-none-match": h["etag"]})
    assert cached.status_code == 304
    # The original is untouched.
    original = await cdn.get(key_path(key))
    assert original.headers["content-type"] == "image/jpeg"
    small = await cdn.get(key_path(key) + "?preset=small")
    assert (decode(small.content).width, decode(small.content).height) == (640, 480)
    assert small.headers["content-type"] == "image/jpeg"


async def test_free_parameters_on_a_public_url_are_refused_and_nothing_is_stored(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, settings: Settings
) -> None:
    key = (await store(api, jpeg()))["key"]
    before = stored_names(settings, key)
    for query in ("w=100", "fmt=webp", "h=10&fit=inside", "preset=thumb&w=10", "preset=nope"):
        assert_error(await cdn.get(f"{key_path(key)}?{query}"), 400, "invalid_transform")
    assert_error(await cdn.get(key_path(key) + "?preset=thumb&w=10"), 400, "invalid_transform")
    assert stored_names(settings, key) == before


async def test_signed_free_parameters_and_tampering(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    key = (await store(api, jpeg()))["key"]
    path = await signed(api, key, w=300, h=100, fit="cover", fmt="png")
    response = await cdn.get(path)
    assert response.status_code == 200, response.text
    image = decode(response.content)
    assert (image.width, image.height, image.get("vips-loader")) == (300, 100, "pngload_buffer")
    assert response.headers["cache-control"].startswith("private, max-age=")
    assert response.headers["content-disposition"].endswith(".png")
    base, query = path.split("?")
    params = dict(parse_qsl(query))
    changes = ({"w": "301"}, {"fmt": "webp"}, {"q": "90"}, {"fit": "inside"}, {"w": "0"}, {"preset": "thumb"})
    changes += ({"w": "0" * 4300 + "1"},)  # (past what Python reads as an integer: was a 500)
    for change in changes:
        tampered = f"{base}?{urlencode({**params, **change})}"
        assert_error(await cdn.get(tampered), 403, "forbidden")
    dropped = {name: value for name, value in params.items() if name != "h"}
    assert_error(await cdn.get(f"{base}?{urlencode(dropped)}"), 403, "forbidden")
    # A signed original does not take a transform added to it.
    plain = await signed(api, key)
    assert_error(await cdn.get(plain + "&preset=thumb"), 403, "forbidden")
    assert_error(await cdn.get(plain + "&w=10"), 403, "forbidden")
    # Never enlarged.
    big = await cdn.get(await signed(api, key, w=4096, fmt="jpeg", q=50))
    assert (decode(big.content).width, decode(big.content).height) == (1600, 1200)


async def test_a_private_assets_variants_are_private(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    key = (await store(api, jpeg(), private=True))["key"]
    missing = f"{ORG}/{new_asset_id()}/photo.jpg"
    for query in ("preset=thumb", "w=10"):
        hidden = await cdn.get(f"{key_path(key)}?{query}")
        assert_error(hidden, 404, "not_found")
        absent = await cdn.get(key_path(missing))
        assert hidden.json()["error"]["message"] == absent.json()["error"]["message"]
    response = await cdn.get(await signed(api, key, preset="thumb"))
    assert response.status_code == 200
    assert response.headers["cache-control"].startswith("private")
    # Rendered now and stored: still not public.
    assert_error(await cdn.get(key_path(key) + "?preset=thumb"), 404, "not_found")


async def test_fmt_auto_follows_accept(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    key = (await store(api, jpeg()))["key"]
    path = await signed(api, key, w=100, fmt="auto")
    for accept, media in [
        ("image/avif,image/webp,*/*", "image/avif"),
        ("image/webp,*/*", "image/webp"),
        # q=0 is "not acceptable" (RFC 9110 §12.4.2), whatever else the header names.
        ("image/avif;q=0, image/webp;q=0.9, */*;q=0.1", "image/webp"),
        ("image/avif; q=0.0, image/webp;q=0", "image/jpeg"),
        ("image/webp;q=0.5, image/avif;q=bad", "image/avif"),
        ("*/*", "image/jpeg"),
        (None, "image/jpeg"),
    ]:
        headers = {"accept": accept} if accept else {}
        response = await cdn.get(path, headers=headers)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == media
        assert response.headers["vary"] == "Accept"
        assert decode(response.content).width == 100


async def test_orientation_applied_and_no_metadata_leaves(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient
) -> None:
    source = pyvips.Image.black(400, 200, bands=3).new_from_image([10, 200, 30]).copy()
    source.set_type(pyvips.GValue.gint_type, "orientation", 6)
    source.set_type(pyvips.GValue.gstr_type, "exif-ifd0-Artist", "someone")
    source.set_type(pyvips.GValue.gstr_type, "exif-ifd3-GPSLatitudeRef", "N")
    data = bytes(source.jpegsave_buffer())
    assert {"exif-data", "exif-ifd3-GPSLatitudeRef"} <= set(decode(data).get_fields())  # GPS in the source
    key = (await store(api, data))["key"]
    for fmt in ("jpeg", "webp", "png"):
        response = await cdn.get(await signed(api, key, w=100, fmt=fmt))
        image = decode(response.content)
        assert (image.width, image.height) == (100, 200)
        metadata = ("exif", "xmp", "iptc", "icc", "orientation")
        leaked = [f for f in image.get_fields() if f.startswith(metadata)]
        assert leaked == [], fmt
        assert b"someone" not in response.content


async def test_gif_first_frame(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    red = pyvips.Image.black(40, 30, bands=3).new_from_image([255, 0, 0])
    blue = pyvips.Image.black(40, 30, bands=3).new_from_image([0, 0, 255])
    animation = pyvips.Image.arrayjoin([red, blue], across=1).copy()
    animation.set_type(pyvips.GValue.gint_type, "page-height", 30)
    key = (await store(api, bytes(animation.gifsave_buffer()), filename="anim.gif"))["key"]
    response = await cdn.get(key_path(key) + "?preset=small")
    assert response.headers["content-type"] == "image/png"
    image = decode(response.content)
    assert (image.width, image.height) == (40, 30)
    r, _, b = image.getpoint(20, 15)[:3]
    assert r > 200 and b < 50


@pytest.mark.parametrize(
    ("data", "filename"),
    [
        (b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>', "x.svg"),
        (b"plain text\n", "a.txt"),
    ],
)
async def test_svg_and_text_are_not_images(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, settings: Settings, data: bytes, filename: str
) -> None:
    key = (await store(api, data, filename=filename))["key"]
    assert_error(await cdn.get(key_path(key) + "?preset=thumb"), 415, "not_an_image")
    assert len(stored_names(settings, key)) == (1 if settings.storage == "s3" else 2)  # data (+ sidecar)


async def test_a_header_claiming_20000_by_20000_is_422(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient
) -> None:
    from .test_transforms_render import _png_header_only

    key = (await store(api, _png_header_only(20_000, 20_000), filename="huge.png"))["key"]
    response = await cdn.get(key_path(key) + "?preset=thumb")
    assert_error(response, 422, "image_too_large")
    assert response.json()["error"]["details"] == {"pixels": 400_000_000, "limitPixels": 50_000_000}
    # Remembered: asking again (any variant) costs no worker.
    refused = sample("coffer_transform_refusals_total", code="image_too_large")
    again = await cdn.get(key_path(key) + "?preset=small")
    assert_error(again, 422, "image_too_large")
    assert sample("coffer_transform_refusals_total", code="image_too_large") == refused


async def test_deleting_the_asset_removes_every_variant(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, settings: Settings
) -> None:
    key = (await store(api, jpeg()))["key"]
    paths = [key_path(key) + "?preset=thumb", key_path(key) + "?preset=medium", await signed(api, key, w=50)]
    for path in paths:
        assert (await cdn.get(path)).status_code == 200
    assert len(stored_names(settings, key)) >= 4
    response = await api.delete(f"/internal/v1/objects/{key}")
    assert response.status_code == 200
    assert stored_names(settings, key) == []
    for path in paths:
        assert_error(await cdn.get(path), 404, "not_found")


@pytest.mark.parametrize("settings", ["fs"], indirect=True)  # the bound is the worker's, on any driver
async def test_an_asset_keeps_a_bounded_number_of_variants(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, settings: Settings
) -> None:
    """Variants are outside the quota: signed URLs with ever new widths stored one each without
    bound. Past 64 (every public preset URL at once), a new one takes the place of one kept,
    and every URL still answers."""
    key = (await store(api, jpeg(400, 300)))["key"]
    evicted = sample("coffer_transform_variants_evicted_total")
    asked = MAX_VARIANTS_PER_ASSET + 8
    paths = [await signed(api, key, w=width, fmt="png") for width in range(10, 10 + asked)]
    for path in paths:
        answer = await cdn.get(path)
        assert answer.status_code == 200, answer.text
        assert kept_variants(settings, key) <= MAX_VARIANTS_PER_ASSET
    assert kept_variants(settings, key) == MAX_VARIANTS_PER_ASSET
    assert sample("coffer_transform_variants_evicted_total") == evicted + asked - MAX_VARIANTS_PER_ASSET
    # One made room for is rendered again when asked, and answers as it did.
    first = await cdn.get(paths[0])
    assert first.status_code == 200 and decode(first.content).width == 10


def noisy_jpeg(side: int) -> bytes:
    """A square of noise at quality 20: small as a JPEG, about ten times larger as a PNG."""
    red, green, blue = (
        pyvips.Image.gaussnoise(side, side, sigma=90, mean=128, seed=s).cast("uchar") for s in (1, 2, 3)
    )
    return bytes(red.bandjoin([green, blue]).jpegsave_buffer(Q=20))


@pytest.mark.parametrize("settings", ["fs"], indirect=True)  # the bound is the worker's, on any driver
async def test_an_assets_variants_hold_a_bounded_number_of_bytes(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, settings: Settings
) -> None:
    """A 3.7 MB JPEG made 38 MB PNGs, 32 of them kept: an organization's variants were up to
    330 times its quota. A variant larger than the source's budget (8 times the source, at
    least 16 MiB) is refused; kept ones make room by their bytes as by their number."""
    data = noisy_jpeg(3200)  # 1.9 MB; 24 MB as a PNG
    source = (await store(api, data))["key"]
    budget = variant_budget(len(data))
    assert budget == MIN_VARIANT_BYTES  # (a source under 2 MiB)
    whole = await cdn.get(await signed(api, source, w=3200, fmt="png"))
    error = assert_error(whole, 422, "image_too_large")
    assert error["details"]["limitBytes"] == budget and error["details"]["outputBytes"] > budget
    # Refused for that variant, not the source: others of it are made.
    assert (await cdn.get(key_path(source) + "?preset=thumb")).status_code == 200
    evicted = sample("coffer_transform_variants_evicted_total")
    for width in (1800, 1790, 1780):  # about 7.5 MB each as PNG: two fit the budget, not three
        answer = await cdn.get(await signed(api, source, w=width, fmt="png"))
        assert answer.status_code == 200, answer.text
        org, asset, _ = source.split("/")
        kept = [n for n in stored_names(settings, source) if "%meta" not in n and "%tmp" not in n]
        held = sum(
            Path(p).stat().st_size for p in Path(settings.blob_dir, "objects", org).glob(f"*/{asset}.*")
        )
        assert held - len(data) <= budget, (kept, held)
    assert sample("coffer_transform_variants_evicted_total") > evicted  # the third made room


async def test_concurrent_requests_for_one_new_variant_compute_it_once(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient
) -> None:
    key = (await store(api, jpeg(3000, 2000)))["key"]
    path = await signed(api, key, w=777, fmt="webp")
    computed = sample("coffer_transform_variants_computed_total")
    shared = sample("coffer_transform_shared_total")
    answers = await asyncio.gather(*(cdn.get(path) for _ in range(20)))
    assert {a.status_code for a in answers} == {200}
    assert len({a.content for a in answers}) == 1
    assert sample("coffer_transform_variants_computed_total") == computed + 1
    assert sample("coffer_transform_shared_total") > shared
    # A request that missed the variant just before its render ended asks the pool again
    # after the flight is over: the worker finds it stored and does not render it again.
    pool = state_of(cdn.app, BlobState).transforms  # type: ignore[attr-defined]
    assert pool is not None
    transform = Transform(w=777, fmt="webp")
    assert await pool.render(key, variant_key(key, transform), transform, private=False) == ("found",)
    assert sample("coffer_transform_variants_computed_total") == computed + 1


async def test_transforms_off_answer_404(settings: Settings, api: httpx.AsyncClient) -> None:
    key = (await store(api, jpeg()))["key"]
    app = create_cdn_app(settings.model_copy(update={"transforms": False}))
    async with app_client(app, CDN_URL) as cdn:
        assert_error(await cdn.get(key_path(key) + "?preset=thumb"), 404, "not_found")
        assert_error(await cdn.get(await signed(api, key, w=10)), 404, "not_found")
        assert (await cdn.get(key_path(key))).status_code == 200


async def test_a_full_queue_answers_503_and_originals_are_still_served(
    settings: Settings, api: httpx.AsyncClient
) -> None:
    key = (await store(api, jpeg(3000, 2000)))["key"]
    app = create_cdn_app(settings.model_copy(update={"cdn_transform_queue": 0}))
    async with app_client(app, CDN_URL) as cdn:
        paths = [await signed(api, key, w=100 + i, fmt="png") for i in range(6)]
        answers = await asyncio.gather(*(cdn.get(path) for path in paths), cdn.get(key_path(key)))
        statuses = [a.status_code for a in answers[:-1]]
        assert set(statuses) <= {200, 503} and 503 in statuses and 200 in statuses
        for answer in answers[:-1]:
            if answer.status_code == 503:
                assert_error(answer, 503, "unavailable")
                assert int(answer.headers["retry-after"]) >= 1
        assert answers[-1].status_code == 200


async def test_a_render_past_the_time_limit_is_503_and_its_worker_replaced(
    settings: Settings, api: httpx.AsyncClient
) -> None:
    key = (await store(api, jpeg(6000, 4000)))["key"]
    app = create_cdn_app(settings.model_copy(update={"cdn_transform_timeout": 0.001}))
    async with app_client(app, CDN_URL) as cdn:
        rejected = sample("coffer_transform_rejections_total", reason="timeout")
        assert_error(await cdn.get(await signed(api, key, w=4000, fmt="png")), 503, "unavailable")
        assert sample("coffer_transform_rejections_total", reason="timeout") == rejected + 1
    # A pool with room to work renders the same source.
    app = create_cdn_app(settings)
    async with app_client(app, CDN_URL) as cdn:
        assert (await cdn.get(await signed(api, key, w=40, fmt="png"))).status_code == 200


async def test_organization_presets(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    base = f"/internal/v1/transform-presets/{ORG}"
    assert (await api.get(base)).json() == {"presets": {}}
    put = await api.put(f"{base}/hero", json={"w": 500, "fmt": "jpeg", "q": 70})
    assert put.status_code == 200, put.text
    assert put.json() == {"w": 500, "h": None, "fit": "cover", "fmt": "jpeg", "q": 70}
    key = (await store(api, jpeg()))["key"]
    hero = await cdn.get(key_path(key) + "?preset=hero")  # the test's CDN caches presets 0 s
    assert hero.status_code == 200, hero.text
    assert (decode(hero.content).width, hero.headers["content-type"]) == (500, "image/jpeg")
    signed_hero = await cdn.get(await signed(api, key, preset="hero"))
    assert signed_hero.content == hero.content
    # Another organization's preset of that name does not exist for this one.
    other = "org_01JD4Z3X6Q8ZK3Q0W5N6M7P8RA"
    assert (await api.get(f"/internal/v1/transform-presets/{other}")).json() == {"presets": {}}
    # Refusals: built-in or bad names, bad bodies, the 21st.
    for name in ("thumb", "Hero", "-x", "a" * 33):
        assert_error(await api.put(f"{base}/{name}", json={"w": 10}), 400, "invalid_transform")
    for body in ({}, {"q": 50}, {"w": 0}, {"w": 5000}, {"fit": "fill", "w": 5}, {"fmt": "gif"}):
        assert_error(await api.put(f"{base}/bad", json=body), 400, "invalid_transform")
    assert_error(await api.put(f"{base}/bad", json={"w": True}), 400, "invalid_request")  # mistyped
    for i in range(19):
        assert (await api.put(f"{base}/p{i}", json={"w": 10 + i})).status_code == 200
    assert_error(await api.put(f"{base}/one-too-many", json={"w": 10}), 409, "conflict")
    assert (await api.put(f"{base}/hero", json={"w": 600})).status_code == 200  # replacing is fine
    assert len((await api.get(base)).json()["presets"]) == 20
    # Deleted: the public URL's preset is unknown again.
    assert (await api.delete(f"{base}/hero")).status_code == 200
    assert_error(await api.delete(f"{base}/hero"), 404, "not_found")
    assert_error(await api.delete(f"{base}/%C2%84"), 404, "not_found")  # no preset has that name
    assert_error(await cdn.get(key_path(key) + "?preset=hero"), 400, "invalid_transform")
    # A preset's object is no asset: the CDN never serves it.
    assert_error(await cdn.get(f"/{ORG}/presets/v%25preset.p1"), 404, "not_found")


def _put_preset(settings: Settings, name: str) -> str:
    """One blob replica's write of one preset (run in a process of its own): what it answered."""
    storage = make_storage(settings)
    try:
        return "created" if presets.put(storage, ORG, name, Transform(w=10 + len(name))) else "replaced"
    except CofferError as exc:
        return exc.code
    finally:
        storage.close()


def test_concurrent_writes_of_different_presets_all_land(settings: Settings) -> None:
    """Blob replicas writing an organization's presets at the same instant: every one lands
    (the old whole-organization object, rewritten by each, kept only the last writer's)."""
    names = [f"replica-{i}" for i in range(8)]
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(len(names), mp_context=context) as replicas:
        assert list(replicas.map(_put_preset, [settings] * len(names), names)) == ["created"] * len(names)
    storage = make_storage(settings)
    assert sorted(presets.read(storage, ORG)) == names


def test_the_bound_holds_against_concurrent_creations(settings: Settings) -> None:
    storage = make_storage(settings)
    for i in range(transforms.MAX_ORG_PRESETS - 2):
        presets.put(storage, ORG, f"p{i}", Transform(w=10))
    names = [f"late-{i}" for i in range(6)]
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(len(names), mp_context=context) as replicas:
        outcomes = list(replicas.map(_put_preset, [settings] * len(names), names))
    assert set(outcomes) <= {"created", "conflict"} and outcomes.count("created") <= 2, outcomes
    assert len(presets.read(storage, ORG)) <= transforms.MAX_ORG_PRESETS


async def test_presets_written_before_the_split_are_read_and_moved_on_the_next_write(
    settings: Settings, api: httpx.AsyncClient, cdn: httpx.AsyncClient
) -> None:
    storage = make_storage(settings)
    old = {"presets": {"hero": {"w": 500, "fmt": "jpeg"}, "tile": {"w": 64, "h": 64}}}
    body = json.dumps(old).encode()
    writer = storage.open_writer(presets.legacy_key(ORG))
    writer.write(body)
    writer.commit(content_type="application/json", sha256=hashlib.sha256(body).hexdigest(), private=True)
    base = f"/internal/v1/transform-presets/{ORG}"
    assert sorted((await api.get(base)).json()["presets"]) == ["hero", "tile"]
    key = (await store(api, jpeg()))["key"]
    assert decode((await cdn.get(key_path(key) + "?preset=hero")).content).width == 500
    assert (await api.put(f"{base}/banner", json={"w": 300})).status_code == 200
    assert storage.stat(presets.legacy_key(ORG)) is None
    assert sorted((await api.get(base)).json()["presets"]) == ["banner", "hero", "tile"]
    assert (await api.delete(f"{base}/tile")).status_code == 200
    assert sorted((await api.get(base)).json()["presets"]) == ["banner", "hero"]


async def test_head_never_renders(api: httpx.AsyncClient, cdn: httpx.AsyncClient, settings: Settings) -> None:
    key = (await store(api, jpeg(), filename="beach.jpg"))["key"]
    computed = sample("coffer_transform_variants_computed_total")
    stored = stored_names(settings, key)
    head = await cdn.head(key_path(key) + "?preset=thumb")
    assert head.status_code == 200
    assert head.headers["content-type"] == "image/webp"
    assert head.headers["content-disposition"] == "inline; filename*=UTF-8''beach.webp"
    assert head.headers["cache-control"] == "no-store"
    assert "etag" not in head.headers and "content-length" not in head.headers  # unknown, not 0
    assert sample("coffer_transform_variants_computed_total") == computed
    assert stored_names(settings, key) == stored  # the original only
    # Once rendered, HEAD answers from the stored variant.
    got = await cdn.get(key_path(key) + "?preset=thumb")
    head = await cdn.head(key_path(key) + "?preset=thumb")
    assert (head.headers["etag"], head.headers["content-length"]) == (
        got.headers["etag"],
        str(len(got.content)),
    )
    # The same checks as GET first (a HEAD answer has no body): a source that is not an image.
    text = (await store(api, b"plain text\n", filename="notes.jpg"))["key"]
    assert (await cdn.head(key_path(text) + "?preset=thumb")).status_code == 415


async def test_a_preset_is_known_to_the_cdn_as_soon_as_it_is_written(
    settings: Settings, api: httpx.AsyncClient
) -> None:
    key = (await store(api, jpeg()))["key"]
    app = create_cdn_app(settings.model_copy(update={"cdn_tuning": CdnTuning(preset_cache_seconds=5.0)}))
    async with app_client(app, CDN_URL) as cdn:
        assert_error(await cdn.get(key_path(key) + "?preset=banner"), 400, "invalid_transform")
        base = f"/internal/v1/transform-presets/{ORG}"
        assert (await api.put(f"{base}/banner", json={"w": 300, "fmt": "png"})).status_code == 200
        banner = await cdn.get(key_path(key) + "?preset=banner")  # within the cache's 5 s
        assert banner.status_code == 200, banner.text
        assert decode(banner.content).width == 300
