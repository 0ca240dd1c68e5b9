"""The transform pool's bounds (issue 44), in process with real worker processes: a worker's
kernel memory limit turns a render that needs more into a 422 for that source alone, a render
that ran out of time is remembered, and organizations share the workers fairly.

On the filesystem driver only: these are the pool's rules, the same on either store.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pyvips
from prometheus_client import REGISTRY

from coffer_blob.config import Settings
from coffer_blob.main import create_app, create_cdn_app
from coffer_blob.transforms.limits import MIB
from coffer_kit.internal import INTERNAL_TOKEN_HEADER
from coffer_testkit.testing import app_client, assert_error

from .support import CDN_URL, END, MULTIPART, ORG, TOKEN, file_part, new_asset_id
from .test_cdn import key_path

pytestmark = [pytest.mark.anyio, pytest.mark.processes]  # real transform worker processes
OTHER_ORG = "org_01JD4Z3X6Q8ZK3Q0W5N6M7P8RB"


@pytest.fixture(scope="module")
def photo() -> bytes:
    """A 24 MP JPEG of noise (13 MB): decoding it is real work, as for a photograph."""
    noise = pyvips.Image.gaussnoise(6000, 4000, mean=128, sigma=40).cast("uchar")
    return bytes(noise.bandjoin([noise, noise]).jpegsave_buffer(Q=85))


def small_jpeg() -> bytes:
    return bytes(pyvips.Image.black(64, 48, bands=3).jpegsave_buffer())


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings)
    async with app_client(app, "http://blob.internal", {INTERNAL_TOKEN_HEADER: TOKEN}) as client:
        yield client


async def store(api: httpx.AsyncClient, data: bytes, org: str = ORG) -> str:
    body = file_part(data, filename="photo.jpg", content_type="image/jpeg") + END
    response = await api.post(
        f"/internal/v1/uploads/{org}/{new_asset_id()}", content=body, headers={"content-type": MULTIPART}
    )
    assert response.status_code == 201, response.text
    return response.json()["key"]  # type: ignore[no-any-return]


async def signed(api: httpx.AsyncClient, key: str, **transform: Any) -> str:
    response = await api.post(
        "/internal/v1/sign", json={"key": key, "expiresIn": 600, "transform": transform}
    )
    assert response.status_code == 200, response.text
    url = httpx.URL(response.json()["url"])
    return f"{url.path}?{url.query.decode()}"


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_render_past_the_workers_memory_is_a_422_for_that_source_alone(
    settings: Settings, api: httpx.AsyncClient, photo: bytes
) -> None:
    # 128 MiB: a data limit of 96 MiB, where decoding 24 MP to 2000 wide needs about 170.
    app = create_cdn_app(settings.model_copy(update={"cdn_transform_worker_memory_mb": 128}))
    big, small = await store(api, photo), await store(api, small_jpeg())
    async with app_client(app, CDN_URL) as cdn:
        answer = await cdn.get(await signed(api, big, w=2000, fmt="webp"))
        assert_error(answer, 422, "image_too_large")
        assert answer.json()["error"]["details"] == {"limitBytes": 96 * MIB}
        # Remembered: the next variant of that source is refused without a worker.
        refused = sample("coffer_transform_refusals_total", code="image_too_large")
        assert_error(await cdn.get(await signed(api, big, w=100, fmt="webp")), 422, "image_too_large")
        assert sample("coffer_transform_refusals_total", code="image_too_large") == refused
        # Other sources are served by the same pool.
        served = await cdn.get(await signed(api, small, w=32, fmt="png"))
        assert served.status_code == 200, served.text
        assert (await cdn.get(key_path(small))).status_code == 200


async def test_a_render_out_of_time_is_remembered(
    settings: Settings, api: httpx.AsyncClient, photo: bytes
) -> None:
    app = create_cdn_app(settings.model_copy(update={"cdn_transform_timeout": 6.0}))
    key, small = await store(api, photo), await store(api, small_jpeg())
    async with app_client(app, CDN_URL) as cdn:
        # The workers are started (the pool's start is not a render's time; it goes on when
        # a request waiting for it gives up).
        warm, deadline = await signed(api, small, w=32, fmt="png"), time.monotonic() + 60
        while (await cdn.get(warm)).status_code != 200:
            assert time.monotonic() < deadline
        timeouts = sample("coffer_transform_rejections_total", reason="timeout")
        # Encoded as AVIF at 2000 wide: 15 s of CPU.
        slow = await signed(api, key, w=2000, fmt="avif")
        assert_error(await cdn.get(slow), 503, "unavailable")
        started = time.perf_counter()
        again = await cdn.get(slow)
        assert time.perf_counter() - started < 0.5
        assert_error(again, 503, "unavailable")
        assert int(again.headers["retry-after"]) > 60
        assert "not tried again" in again.json()["error"]["message"]
        assert sample("coffer_transform_rejections_total", reason="timeout") == timeouts + 2
        # Another variant of the source, shrunk on load, is rendered.
        thumb = await cdn.get(await signed(api, key, w=50, fmt="png"))
        assert thumb.status_code == 200, thumb.text


async def test_one_organizations_renders_do_not_starve_anothers(
    settings: Settings, api: httpx.AsyncClient, photo: bytes
) -> None:
    # Two workers, a queue of 8: one organization may have 5 renders admitted and hold one worker.
    app = create_cdn_app(
        settings.model_copy(update={"cdn_transform_workers": 2, "cdn_transform_timeout": 60.0})
    )
    heavy = await store(api, photo)
    light = await store(api, small_jpeg(), org=OTHER_ORG)
    heavy_paths = [await signed(api, heavy, w=3000 + i, fmt="png") for i in range(6)]
    light_path = await signed(api, light, w=32, fmt="png")
    finished: list[str] = []
    async with app_client(app, CDN_URL) as cdn:
        # The workers start before anything is measured.
        assert (await cdn.get(await signed(api, light, w=16, fmt="png"))).status_code == 200

        async def get(path: str, name: str) -> httpx.Response:
            answer = await cdn.get(path)
            finished.append(name)
            return answer

        flood = [asyncio.ensure_future(get(path, "heavy")) for path in heavy_paths]
        await asyncio.sleep(0)  # the flood is admitted first
        answers = await asyncio.gather(*flood, get(light_path, "light"))
    statuses = [a.status_code for a in answers[:-1]]
    # Past its share, one organization is refused while others still have room.
    assert sorted(statuses) == [200] * 5 + [503], statuses
    assert answers[-1].status_code == 200, answers[-1].text
    # The other organization's render went to the worker the flood could not take: it ended
    # before all but at most one of the flood's (and at most 2 of them, the refusal included).
    assert finished.index("light") <= 2, finished
