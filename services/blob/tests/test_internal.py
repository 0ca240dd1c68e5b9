"""Deleting objects and prefixes, signing URLs, health and readiness of the internal listener."""

from __future__ import annotations

import math
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from coffer_blob import signing
from coffer_testkit.testing import assert_error

from .support import (
    CDN_URL,
    MULTIPART,
    ORG,
    SECRET,
    bucket_dir,
    file_head,
    files_under,
    new_asset_id,
    object_path,
    upload,
)

pytestmark = pytest.mark.anyio
# A well-formed asset id (nothing needs to be stored under it).
AST = "ast_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9"


async def test_delete_object_is_idempotent(api: httpx.AsyncClient, blob_dir: Path) -> None:
    key = (await upload(api)).json()["key"]
    for _ in range(2):
        response = await api.delete(f"/internal/v1/objects/{key}")
        assert response.status_code == 200
        assert response.json() == {"deleted": True}
    assert files_under(blob_dir / "objects") == []


async def test_delete_object_with_an_encoded_key(api: httpx.AsyncClient, blob_dir: Path) -> None:
    key = (await upload(api, filename="résumé final (1).pdf")).json()["key"]
    from urllib.parse import quote

    response = await api.delete(f"/internal/v1/objects/{quote(key, safe='/')}")
    assert response.status_code == 200
    assert files_under(blob_dir / "objects") == []


@pytest.mark.parametrize("key", ["org_1/ast_1", "org_1/ast_1/a/b", "org_1/ast_1/%25meta.json", "x/y/z"])
async def test_delete_object_refuses_what_is_not_a_key(api: httpx.AsyncClient, key: str) -> None:
    assert_error(await api.delete(f"/internal/v1/objects/{key}"), 400, "invalid_request")


async def test_delete_prefix_removes_objects_and_unfinished_uploads(
    api: httpx.AsyncClient, blob_dir: Path
) -> None:
    asset_id = new_asset_id()
    await upload(api, asset_id=asset_id)
    stray = bucket_dir(blob_dir, ORG, asset_id) / f"{asset_id}%tmp.left-by-a-crash"
    stray.write_bytes(b"partial")
    kept = (await upload(api)).json()["key"]
    for _ in range(2):
        response = await api.delete(f"/internal/v1/prefixes/{ORG}/{asset_id}")
        assert response.status_code == 200
        assert response.json() == {"deleted": True}
    assert not [p for p in files_under(blob_dir / "objects") if asset_id in p]
    assert object_path(blob_dir, kept).exists()
    assert_error(await api.delete(f"/internal/v1/prefixes/{ORG}/fld_1"), 400, "invalid_request")


async def test_sign(api: httpx.AsyncClient) -> None:
    key = f"{ORG}/{new_asset_id()}/résumé final.pdf"
    before = time.time()
    response = await api.post("/internal/v1/sign", json={"key": key, "expiresIn": 600})
    assert response.status_code == 200, response.text
    body = response.json()
    assert math.ceil(before) + 600 <= body["expires"] <= math.ceil(time.time()) + 600
    url = urlsplit(body["url"])
    assert f"{url.scheme}://{url.netloc}" == CDN_URL
    assert url.path == "/" + key.replace("résumé final.pdf", "r%C3%A9sum%C3%A9%20final.pdf")
    query = parse_qs(url.query)
    assert query["expires"] == [str(body["expires"])]
    assert query["signature"] == [signing.signature(SECRET.encode(), key, body["expires"])]


@pytest.mark.parametrize(
    "body",
    [
        {"key": f"{ORG}/{AST}/a.txt", "expiresIn": 0},
        {"key": f"{ORG}/{AST}/a.txt", "expiresIn": 604801},
        {"key": f"{ORG}/{AST}/a.txt", "expiresIn": "60"},
        {"key": f"{ORG}/{AST}/a.txt", "expiresIn": 1.5},
        {"key": f"{ORG}/{AST}/a.txt", "expiresIn": True},
        {"key": f"{ORG}/{AST}/a.txt"},
        {"key": f"{ORG}/{AST}", "expiresIn": 60},
        {"key": 5, "expiresIn": 60},
        {"expiresIn": 60},
    ],
)
async def test_sign_refuses_bad_input(api: httpx.AsyncClient, body: dict[str, object]) -> None:
    assert_error(await api.post("/internal/v1/sign", json=body), 400, "invalid_request")


async def test_sign_limits_are_inclusive(api: httpx.AsyncClient) -> None:
    for expires_in in (1, 604800):
        response = await api.post(
            "/internal/v1/sign", json={"key": f"{ORG}/{AST}/a", "expiresIn": expires_in}
        )
        assert response.status_code == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/internal/v1/sign"),
        ("DELETE", f"/internal/v1/objects/{ORG}/ast_1/a.txt"),
        ("DELETE", f"/internal/v1/prefixes/{ORG}/{AST}"),
        ("POST", f"/internal/v1/uploads/{ORG}/{AST}"),
    ],
)
async def test_every_internal_route_needs_the_token(api: httpx.AsyncClient, method: str, path: str) -> None:
    response = await api.request(method, path, headers={"x-coffer-internal-token": "nope"})
    assert_error(response, 401, "unauthorized")


async def test_health_readiness_and_metrics(api: httpx.AsyncClient) -> None:
    assert (await api.get("/healthz")).json() == {"status": "ok"}
    ready = await api.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"] == {"storage": "ok"}
    assert (await api.get("/metrics")).status_code == 200
    for path in ("/docs", "/openapi.json", "/redoc"):
        assert (await api.get(path)).status_code == 404


async def test_readiness_fails_when_the_blob_dir_is_unusable(api: httpx.AsyncClient, blob_dir: Path) -> None:
    blob_dir.mkdir(parents=True, exist_ok=True)
    (blob_dir / "objects").write_text("not a directory")
    response = await api.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"] == {"storage": "down"}
    assert (await api.get("/healthz")).status_code == 200


async def test_cdn_role_serves_no_internal_api(settings) -> None:  # type: ignore[no-untyped-def]
    from coffer_blob.main import create_app

    app = create_app(settings, api=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://blob") as client,
    ):
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/metrics")).status_code == 200
        response = await client.post(
            f"/internal/v1/uploads/{ORG}/{AST}",
            content=file_head(),
            headers={"content-type": MULTIPART, "x-coffer-internal-token": "test-internal-token"},
        )
        assert_error(response, 404, "not_found")


async def test_storage_and_download_metrics(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    key = (await upload(api, b"measured")).json()["key"]
    assert (await cdn.get("/" + key)).content == b"measured"
    big = b"x" * (300 * 1024)  # streamed: read_small finds it too large, open_reader sends it
    key = (await upload(api, big)).json()["key"]
    assert (await cdn.get("/" + key)).content == big
    text = (await api.get("/metrics")).text
    for operation in ("open_writer", "write", "commit", "read_small", "open_reader"):
        labels = f'driver="fs",operation="{operation}",outcome="ok"'
        assert f"coffer_storage_operation_duration_seconds_count{{{labels}}}" in text, operation
    assert 'coffer_download_bytes_total{access="public"}' in text
    assert "ast_" not in text  # no ids in labels
