"""Image facts (issue 50) on blob's internal listener, with real worker processes: a JPEG's size
as shown (its EXIF orientation applied) and a BlurHash; a file that is not an image answers
nulls, no error; a missing object is 404."""

from __future__ import annotations

from collections.abc import AsyncIterator

import blurhash
import httpx
import pytest
import pyvips

from coffer_blob.config import Settings
from coffer_blob.main import create_app
from coffer_kit.internal import INTERNAL_TOKEN_HEADER
from coffer_testkit.testing import app_client

from .support import END, MULTIPART, ORG, TOKEN, file_part, new_asset_id

pytestmark = pytest.mark.anyio


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(create_app(settings), "http://blob.internal", {INTERNAL_TOKEN_HEADER: TOKEN}) as c:
        yield c


async def store(api: httpx.AsyncClient, data: bytes, name: str, content_type: str) -> str:
    body = file_part(data, filename=name, content_type=content_type) + END
    response = await api.post(
        f"/internal/v1/uploads/{ORG}/{new_asset_id()}", content=body, headers={"content-type": MULTIPART}
    )
    assert response.status_code == 201, response.text
    return str(response.json()["key"])


def sideways_jpeg() -> bytes:
    """80×40 pixels stored, EXIF orientation 6: shown as 40×80; red left half, blue right."""
    red = pyvips.Image.black(40, 40, bands=3).new_from_image([255, 0, 0])
    blue = pyvips.Image.black(40, 40, bands=3).new_from_image([0, 0, 255])
    image = red.join(blue, "horizontal").copy(interpretation="srgb")
    image.set_type(pyvips.GValue.gint_type, "orientation", 6)
    return bytes(image.jpegsave_buffer(Q=90))


async def test_a_jpeg_answers_its_shown_size_orientation_and_a_blurhash(api: httpx.AsyncClient) -> None:
    key = await store(api, sideways_jpeg(), "photo.jpg", "image/jpeg")
    answer = await api.post(f"/internal/v1/facts/{key}")
    assert answer.status_code == 200, answer.text
    facts = answer.json()
    assert (facts["width"], facts["height"], facts["orientation"]) == (40, 80, 6)
    assert blurhash.components(facts["placeholder"]) == (4, 3)


async def test_a_file_that_is_not_an_image_answers_nulls_and_a_missing_one_404(
    api: httpx.AsyncClient,
) -> None:
    key = await store(api, b"%PDF-1.4 not an image", "doc.pdf", "application/pdf")
    answer = await api.post(f"/internal/v1/facts/{key}")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"width": None, "height": None, "orientation": None, "placeholder": None}
    gone = await api.post(f"/internal/v1/facts/{ORG}/{new_asset_id()}/x.jpg")
    assert gone.status_code == 404
