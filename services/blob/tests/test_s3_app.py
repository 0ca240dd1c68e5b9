"""blob's internal API on the S3 driver: uploads land whole or leave nothing in the bucket."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
import pytest

from coffer_blob.config import Settings
from coffer_blob.storage.s3 import PART_SIZE
from coffer_kit.contract.urls import MAX_FILE_BYTES
from coffer_testkit.pytest_plugin import S3Server
from coffer_testkit.testing import assert_error, pattern_chunks

from .support import END, MULTIPART, ORG, field, file_head, file_part, form, new_asset_id

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings(s3_settings: Settings) -> Settings:
    return s3_settings


def bucket_contents(s3_server: S3Server, settings: Settings) -> tuple[list[str], list[str]]:
    client = s3_server.client()
    objects = [o["Key"] for o in client.list_objects_v2(Bucket=settings.s3_bucket).get("Contents", [])]
    uploads = [u["Key"] for u in client.list_multipart_uploads(Bucket=settings.s3_bucket).get("Uploads", [])]
    return sorted(objects), sorted(uploads)


def streamed(size: int, *, before: bytes = b"", after: bytes = b"", end: bool = True) -> Any:
    async def body() -> Any:
        yield before + file_head(filename="big.bin")
        for chunk in pattern_chunks(size):
            yield chunk
        yield b"\r\n" + after + (END if end else b"")

    return body()


async def post(api: httpx.AsyncClient, body: Any) -> httpx.Response:
    return await api.post(
        f"/internal/v1/uploads/{ORG}/{new_asset_id()}", content=body, headers={"content-type": MULTIPART}
    )


async def test_small_and_multipart_uploads(
    api: httpx.AsyncClient, s3_server: S3Server, settings: Settings
) -> None:
    small = await post(api, form(file_part(b"tiny", filename="a.txt", content_type="text/plain")))
    assert small.status_code == 201, small.text
    size = 2 * PART_SIZE + 3
    big = await post(api, streamed(size, after=field("name", "big one")))
    assert big.status_code == 201, big.text
    expected = hashlib.sha256(b"".join(pattern_chunks(size))).hexdigest()
    assert (big.json()["size"], big.json()["sha256"]) == (size, expected)
    assert big.json()["fields"]["name"] == "big one"
    assert bucket_contents(s3_server, settings) == (sorted([small.json()["key"], big.json()["key"]]), [])
    head = s3_server.client().head_object(Bucket=settings.s3_bucket, Key=big.json()["key"])
    assert head["Metadata"] == {"sha256": expected}
    assert head["ContentType"] == "application/octet-stream"


async def test_refusals_leave_nothing_in_the_bucket(
    api: httpx.AsyncClient, s3_server: S3Server, settings: Settings
) -> None:
    assert_error(await post(api, streamed(MAX_FILE_BYTES + 1)), 413, "file_too_large")
    second_file = file_part(b"x", filename="two.bin")
    assert_error(await post(api, streamed(PART_SIZE + 1, after=second_file)), 400, "invalid_request")
    assert_error(await post(api, streamed(PART_SIZE + 1, end=False)), 400, "invalid_request")
    assert_error(
        await post(api, streamed(PART_SIZE + 1, after=field("name", b"\xff"))), 400, "invalid_request"
    )
    assert bucket_contents(s3_server, settings) == ([], [])


async def test_exactly_max_file_bytes(
    api: httpx.AsyncClient, s3_server: S3Server, settings: Settings
) -> None:
    response = await post(api, streamed(MAX_FILE_BYTES))
    assert response.status_code == 201, response.text
    assert response.json()["size"] == MAX_FILE_BYTES
    assert bucket_contents(s3_server, settings) == ([response.json()["key"]], [])


async def test_delete_prefix_and_object(
    api: httpx.AsyncClient, s3_server: S3Server, settings: Settings
) -> None:
    key = (await post(api, form(file_part(b"one")))).json()["key"]
    org, asset, _ = key.split("/")
    assert (await api.delete(f"/internal/v1/prefixes/{org}/{asset}")).json() == {"deleted": True}
    key = (await post(api, form(file_part(b"two")))).json()["key"]
    assert (await api.delete(f"/internal/v1/objects/{key}")).json() == {"deleted": True}
    assert bucket_contents(s3_server, settings) == ([], [])


async def test_missing_bucket_is_503(settings: Settings) -> None:
    from coffer_blob.main import create_app

    app = create_app(settings.model_copy(update={"s3_bucket": "no-such-bucket-here"}))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://blob",
            headers={"x-coffer-internal-token": "test-internal-token"},
        ) as client,
    ):
        ready = await client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["checks"] == {"storage": "down"}
        assert_error(await post(client, form(file_part(b"x"))), 503, "unavailable")
        assert_error(await post(client, streamed(PART_SIZE + 1)), 503, "unavailable")
