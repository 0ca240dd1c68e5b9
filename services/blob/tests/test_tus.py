"""Resumable uploads' bytes (tus, CONTRACT §9) on both drivers: chunks appended at the durable
offset with the state the last one answered, whatever process takes them, a discarded chunk
leaving no trace, and the last byte publishing the object with the SHA-256 of the whole."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from coffer_blob.config import Settings
from coffer_blob.storage import StorageUnavailable
from coffer_blob.storage.s3 import S3Storage
from coffer_kit.contract.ids import TUS_UPLOAD, new_id
from coffer_testkit.testing import assert_error

from .support import ORG, new_asset_id
from .test_cdn import key_path

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024
# Past one S3 part (8 MiB), in odd pieces.
DATA = os.urandom(11 * MiB + 12345)


@pytest.fixture(params=["fs", "s3"])
def settings(request: pytest.FixtureRequest) -> Settings:
    return request.getfixturevalue("settings" if request.param == "fs" else "s3_settings")  # type: ignore[no-any-return]


class Upload:
    """One resumable upload driven through blob's internal API, as edge drives it."""

    def __init__(self, api: httpx.AsyncClient, key: str, length: int, media_type: str) -> None:
        self.api, self.key, self.length, self.media_type = api, key, length, media_type
        self.asset_id = key.split("/")[1]
        self.id = new_id(TUS_UPLOAD)
        self.offset, self.state = 0, None

    async def put(
        self, data: bytes, *, checksum: str | None = None, offset: int | None = None, **extra: str
    ) -> httpx.Response:
        headers = {"content-type": "application/offset+octet-stream"}
        if self.state is not None:
            headers["coffer-tus-state"] = json.dumps(self.state)
        if checksum is not None:
            headers["coffer-tus-checksum"] = checksum
        params = {
            "key": self.key,
            "offset": self.offset if offset is None else offset,
            "length": self.length,
            "mediaType": self.media_type,
            **extra,
        }
        return await self.api.put(
            f"/internal/v1/tus/{ORG}/{self.asset_id}/{self.id}", params=params, content=data, headers=headers
        )

    async def append(self, data: bytes) -> dict[str, Any]:
        response = await self.put(data)
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        self.offset, self.state = answer["offset"], answer["state"]
        return answer


async def new_upload(api: httpx.AsyncClient, length: int, filename: str = "clip.bin") -> Upload:
    target = {"assetId": new_asset_id(), "filename": filename}
    named = await api.post(f"/internal/v1/tus/{ORG}/key", json=target)
    assert named.status_code == 200, named.text
    return Upload(api, named.json()["key"], length, named.json()["mimeType"])


def leftovers(settings: Settings, s3_server: Any) -> list[str]:
    """What the store holds besides published objects: part files, tails, multipart uploads."""
    if settings.storage == "fs":
        assert settings.blob_dir is not None
        return [p.name for p in Path(settings.blob_dir).rglob("*") if p.is_file() and "%tmp." in p.name]
    client = s3_server.client()
    objects = client.list_objects_v2(Bucket=settings.s3_bucket).get("Contents", [])
    uploads = client.list_multipart_uploads(Bucket=settings.s3_bucket).get("Uploads", [])
    return [o["Key"] for o in objects if "%" in o["Key"]] + [u["Key"] for u in uploads]


async def test_chunks_of_any_size_make_the_whole_file(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, settings: Settings, request: pytest.FixtureRequest
) -> None:
    upload = await new_upload(api, len(DATA))
    cuts = [0, 1, 3 * MiB + 7, 3 * MiB + 8, 9 * MiB + 1, len(DATA)]
    for start, end in itertools.pairwise(cuts):
        answer = await upload.append(DATA[start:end])
        assert answer["offset"] == end
    assert answer["sha256"] == hashlib.sha256(DATA).hexdigest() and answer["state"] is None
    served = await cdn.get(key_path(upload.key))
    assert served.status_code == 200 and served.content == DATA
    s3 = request.getfixturevalue("s3_server") if settings.storage == "s3" else None
    assert leftovers(settings, s3) == []


async def test_a_discarded_chunk_leaves_the_offset_and_the_hash_as_they_were(api: httpx.AsyncClient) -> None:
    upload = await new_upload(api, len(DATA))
    await upload.append(DATA[: 2 * MiB])
    chunk = DATA[2 * MiB :]
    wrong = base64.b64encode(hashlib.sha1(b"other bytes").digest()).decode()
    assert_error(await upload.put(chunk, checksum=f"sha1 {wrong}"), 460, "checksum_mismatch")
    # Bytes past the length, or an unknown algorithm: refused, nothing kept.
    assert_error(await upload.put(chunk + b"!"), 413, "file_too_large")
    assert_error(await upload.put(chunk, checksum="md5 AAAA"), 400, "invalid_request")
    right = base64.b64encode(hashlib.sha256(chunk).digest()).decode()
    response = await upload.put(chunk, checksum=f"sha256 {right}")
    assert response.status_code == 200, response.text
    assert response.json()["sha256"] == hashlib.sha256(DATA).hexdigest()


async def test_a_failed_request_is_overwritten_by_the_next(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient
) -> None:
    """A request that wrote bytes (an S3 part) but never checkpointed counts for nothing: the
    next one from the same state writes over it."""
    upload = await new_upload(api, len(DATA))
    await upload.append(DATA[:MiB])
    junk = os.urandom(9 * MiB)  # a whole S3 part, then refused
    assert_error(await upload.put(junk, checksum="sha256 " + "A" * 43 + "="), 460, "checksum_mismatch")
    await upload.append(DATA[MiB : 10 * MiB])
    answer = await upload.append(DATA[10 * MiB :])
    assert answer["sha256"] == hashlib.sha256(DATA).hexdigest()
    assert (await cdn.get(key_path(upload.key))).content == DATA


async def test_an_empty_file_and_a_one_chunk_file(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    empty = await new_upload(api, 0, "empty.txt")
    answer = await empty.append(b"")
    assert answer == {
        "offset": 0,
        "state": None,
        "sha256": hashlib.sha256(b"").hexdigest(),
        "detectedType": "application/x-empty",
    }
    assert (await cdn.get(key_path(empty.key))).content == b""
    small = await new_upload(api, 5, "hello.txt")
    appended = await small.append(b"hello")
    assert appended["offset"] == 5 and appended["detectedType"] == "text/plain"
    served = await cdn.get(key_path(small.key))
    assert served.content == b"hello" and served.headers["content-type"].startswith("text/plain")


async def test_a_last_byte_asked_held_publishes_the_object_held(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient
) -> None:
    """Issue 48's scan=block: the object is never served before its scan, not even between its
    publication and edge's hold."""
    upload = await new_upload(api, 10, "held.txt")
    first = await upload.put(b"01234", held="true")  # not the last byte: nothing published
    assert first.status_code == 200, first.text
    upload.offset, upload.state = first.json()["offset"], first.json()["state"]
    published = await upload.put(b"56789", held="true")
    assert published.status_code == 200 and published.json()["offset"] == 10
    assert_error(await cdn.get(key_path(upload.key)), 404, "not_found")
    released = await api.put(f"/internal/v1/held/{upload.key}", json={"held": False})
    assert released.status_code == 200, released.text
    assert (await cdn.get(key_path(upload.key))).content == b"0123456789"


async def test_bad_requests(api: httpx.AsyncClient) -> None:
    upload = await new_upload(api, 10)
    upload.key = f"{ORG}/{new_asset_id()}/clip.bin"  # another asset's key
    assert_error(await upload.put(b"x"), 400, "invalid_request")
    upload = await new_upload(api, 10)
    assert_error(await upload.put(b"x", offset=11), 400, "invalid_request")
    upload.id = "tus_not-an-id"
    assert_error(await upload.put(b"x"), 400, "invalid_request")
    named = await api.post(f"/internal/v1/tus/{ORG}/key", json={"assetId": "nope", "filename": "a"})
    assert named.status_code == 422 or named.status_code == 400


@pytest.mark.parametrize("settings", ["s3"], indirect=True)
async def test_a_last_chunk_whose_publish_failed_is_taken_again(
    api: httpx.AsyncClient,
    cdn: httpx.AsyncClient,
    settings: Settings,
    s3_server: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On S3, the last chunk completes the multipart upload into the temp object, then copies
    that to the asset's key. When the copy fails (503), the parts are gone: the client's retry
    of the same chunk found no upload to add to, and every retry failed after it. Now it
    starts the upload again from the bytes the temp object holds."""
    upload = await new_upload(api, len(DATA))
    await upload.append(DATA[: 9 * MiB + 1])  # one part and a tail
    calls = S3Storage._call

    def copy_fails_once(self: S3Storage, what: str, method: str, **kwargs: Any) -> Any:
        if method == "copy_object" and not failed:
            failed.append(method)
            raise StorageUnavailable("S3 copy_object failed: InternalError (once)")
        return calls(self, what, method, **kwargs)

    failed: list[str] = []
    monkeypatch.setattr(S3Storage, "_call", copy_fails_once)
    assert_error(await upload.put(DATA[9 * MiB + 1 :]), 503, "unavailable")
    assert failed == ["copy_object"]
    answer = await upload.append(DATA[9 * MiB + 1 :])
    assert answer["offset"] == len(DATA) and answer["sha256"] == hashlib.sha256(DATA).hexdigest()
    assert (await cdn.get(key_path(upload.key))).content == DATA
    assert leftovers(settings, s3_server) == []


@pytest.mark.parametrize("before_last", [8 * MiB, 9 * MiB + 1], ids=["parts-only", "with-tail"])
async def test_a_last_chunk_retried_after_it_published_answers_the_same_file(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, before_last: int
) -> None:
    """The last chunk published the file, then edge failed to make the asset (metadata down)
    and the client sent the chunk again with the same offset and state: the upload's parts and
    tails are gone by then. The same bytes are answered as the first time, on either driver,
    whether the bytes before held a tail or only whole S3 parts (8 MiB); other bytes are 503."""
    upload = await new_upload(api, len(DATA))
    await upload.append(DATA[:before_last])
    offset, state = upload.offset, upload.state
    first = await upload.append(DATA[before_last:])
    upload.offset, upload.state = offset, state
    again = await upload.put(DATA[before_last:])
    assert again.status_code == 200, again.text
    assert (again.json()["offset"], again.json()["sha256"]) == (len(DATA), first["sha256"])
    assert again.json()["sha256"] == hashlib.sha256(DATA).hexdigest()
    other = DATA[before_last:-1] + bytes([DATA[-1] ^ 1])
    assert_error(await upload.put(other), 503, "unavailable")
    assert (await cdn.get(key_path(upload.key))).content == DATA
