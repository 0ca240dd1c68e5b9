"""Private objects (CONTRACT §12) on both drivers: the bare key answers 404 exactly as a key
that does not exist, a signed URL serves the bytes, and a change of visibility shows on the
CDN's next request (the visibility is kept with the object, no cache in between)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from coffer_blob.config import Settings
from coffer_testkit.testing import assert_error

from .support import END, MULTIPART, ORG, field, file_part, form, new_asset_id
from .test_cdn import key_path, signed_path

pytestmark = pytest.mark.anyio

DATA = b"private bytes " * 100  # small: the fast path on fs
BIG = b"x" * (300 * 1024)  # past the fast path and the small read: streamed


@pytest.fixture(params=["fs", "s3"])
def settings(request: pytest.FixtureRequest) -> Settings:
    return request.getfixturevalue("settings" if request.param == "fs" else "s3_settings")  # type: ignore[no-any-return]


async def store(
    api: httpx.AsyncClient, data: bytes = DATA, *, query: str = "", before: bytes = b"", after: bytes = b""
) -> dict[str, Any]:
    body = before + file_part(data, filename="secret.txt", content_type="text/plain") + after + END
    response = await api.post(
        f"/internal/v1/uploads/{ORG}/{new_asset_id()}{query}",
        content=body,
        headers={"content-type": MULTIPART},
    )
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


async def set_visibility(api: httpx.AsyncClient, key: str, visibility: str) -> httpx.Response:
    return await api.put(f"/internal/v1/visibility/{key}", json={"visibility": visibility})


async def assert_hidden(cdn: httpx.AsyncClient, key: str) -> None:
    """The bare key answers as a key that does not exist: same status, same envelope."""
    hidden = await cdn.get(key_path(key))
    missing = await cdn.get(key_path(f"{ORG}/{new_asset_id()}/secret.txt"))
    assert_error(hidden, 404, "not_found")
    assert hidden.json()["error"]["message"] == missing.json()["error"]["message"]
    assert (await cdn.head(key_path(key))).status_code == 404
    assert (await cdn.get(key_path(key), headers={"if-none-match": "*"})).status_code == 404
    assert (await cdn.get(key_path(key), headers={"range": "bytes=0-3"})).status_code == 404


@pytest.mark.parametrize("data", [DATA, BIG], ids=["small", "large"])
async def test_private_object_is_served_signed_only(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, data: bytes
) -> None:
    stored = await store(api, data, query="?visibility=private")
    assert stored["visibility"] == "private"
    await assert_hidden(cdn, stored["key"])
    signed = await signed_path(api, stored["key"])
    response = await cdn.get(signed)
    assert response.status_code == 200
    assert response.content == data
    assert response.headers["cache-control"].startswith("private, max-age=")
    # The signed URL with its query stripped is the bare key: 404.
    assert (await cdn.get(signed.split("?", 1)[0])).status_code == 404


async def test_the_form_field_decides_before_or_after_the_file(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient
) -> None:
    before = await store(api, before=field("visibility", "private"))
    after = await store(api, query="?visibility=public", after=field("visibility", "private"))
    public = await store(api, query="?visibility=private", after=field("visibility", "public"))
    assert (before["visibility"], after["visibility"], public["visibility"]) == (
        "private",
        "private",
        "public",
    )
    await assert_hidden(cdn, before["key"])
    await assert_hidden(cdn, after["key"])
    assert (await cdn.get(key_path(public["key"]))).content == DATA
    # A fixed visibility (an upload token's) is not the form's to change.
    fixed = await store(api, query="?visibility=private&fixed=true", after=field("visibility", "public"))
    assert fixed["visibility"] == "private"
    await assert_hidden(cdn, fixed["key"])


async def test_a_bad_visibility_is_refused_and_stores_nothing(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient
) -> None:
    asset_id = new_asset_id()
    body = form(file_part(DATA, filename="secret.txt"), field("visibility", "secret"))
    response = await api.post(
        f"/internal/v1/uploads/{ORG}/{asset_id}", content=body, headers={"content-type": MULTIPART}
    )
    assert_error(response, 400, "invalid_request")
    assert (await cdn.get(key_path(f"{ORG}/{asset_id}/secret.txt"))).status_code == 404
    bad_query = await api.post(
        f"/internal/v1/uploads/{ORG}/{new_asset_id()}?visibility=hidden",
        content=form(file_part(DATA)),
        headers={"content-type": MULTIPART},
    )
    assert bad_query.status_code in (400, 422)


async def test_switching_visibility_shows_on_the_next_request(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient
) -> None:
    for data in (DATA, BIG):
        stored = await store(api, data)
        key = stored["key"]
        public = await cdn.get(key_path(key))
        assert public.status_code == 200
        assert public.headers["cache-control"] == "public, max-age=31536000, immutable"
        response = await set_visibility(api, key, "private")
        assert response.status_code == 200, response.text
        assert response.json() == {"key": key, "visibility": "private"}
        await assert_hidden(cdn, key)
        assert (await cdn.get(await signed_path(api, key))).content == data
        assert (await set_visibility(api, key, "private")).status_code == 200  # idempotent
        assert (await set_visibility(api, key, "public")).status_code == 200
        again = await cdn.get(key_path(key))
        assert again.status_code == 200
        assert again.content == data
        assert again.headers["etag"] == public.headers["etag"]


async def test_visibility_of_a_missing_object_or_a_bad_key(api: httpx.AsyncClient) -> None:
    assert_error(await set_visibility(api, f"{ORG}/{new_asset_id()}/none.txt", "private"), 404, "not_found")
    assert_error(await set_visibility(api, "not/a/key", "private"), 400, "invalid_request")
    stored = await store(api)
    assert (
        await api.put(f"/internal/v1/visibility/{stored['key']}", json={"visibility": "hidden"})
    ).status_code in (400, 422)
    # Deleted objects stay deleted: no visibility change brings them back.
    assert (await api.delete(f"/internal/v1/objects/{stored['key']}")).status_code == 200
    assert_error(await set_visibility(api, stored["key"], "private"), 404, "not_found")


async def test_public_max_age_is_a_setting(settings: Settings) -> None:
    from coffer_blob.main import create_app, create_cdn_app
    from coffer_kit.internal import INTERNAL_TOKEN_HEADER
    from coffer_testkit.testing import app_client

    from .support import CDN_URL, TOKEN

    short = settings.model_copy(update={"cdn_public_max_age": 60})
    async with (
        app_client(create_app(short), "http://blob.internal", {INTERNAL_TOKEN_HEADER: TOKEN}) as api,
        app_client(create_cdn_app(short), CDN_URL) as cdn,
    ):
        stored = await store(api)
        response = await cdn.get(key_path(stored["key"]))
        assert response.headers["cache-control"] == "public, max-age=60, immutable"
