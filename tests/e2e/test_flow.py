"""The whole flow once per backend, over real processes: the rules themselves are tested in
process (services/edge/tests/api); this holds the processes, ports and storage together."""

from __future__ import annotations

import time

import httpx
import pytest

from coffer_testkit.testing import assert_error, pattern_bytes

# The API's conformance end to end, on the embedded default and on production behind PgBouncer
# in transaction mode ("pooled": production's usual connection pooler, docs/operations.md); the
# other end-to-end tests cover production without the pooler.
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.parametrize("backend", ["embedded", "pooled"], indirect=True, scope="session"),
]


def test_folder_upload_list_download_sign_delete(stack, tenant) -> None:
    api = tenant.api
    folder = api.post("/api/folders", json={"name": "Photos"}).json()
    assert api.get("/api/folders").json()["folders"] == [folder]
    data = pattern_bytes(300_000)  # large enough to be streamed by the CDN, not sent whole
    created = api.post(
        "/api/assets",
        files={"file": ("été.bin", data, "application/octet-stream")},
        data={"folderId": folder["id"]},
    )
    assert created.status_code == 201, created.text
    asset = created.json()
    assert asset["folderId"] == folder["id"] and asset["size"] == len(data)
    assert asset["publicUrl"].startswith(stack.public_cdn_url + "/")
    listed = api.get("/api/assets", params={"folderId": folder["id"]}).json()
    assert listed["total"] == 1 and listed["assets"] == [asset]
    assert api.get(f"/api/assets/{asset['id']}").json() == asset

    public = httpx.get(asset["publicUrl"])
    assert public.status_code == 200 and public.content == data
    signed = api.get(f"/api/assets/{asset['id']}/url", params={"expiresIn": 60}).json()["url"]
    ranged = httpx.get(signed, headers={"range": "bytes=10-19"})
    assert ranged.status_code == 206 and ranged.content == data[10:20]

    assert api.delete(f"/api/assets/{asset['id']}").json() == {"success": True}
    for url in (asset["publicUrl"], signed):
        assert_error(httpx.get(url), 404, "not_found")
    assert api.delete(f"/api/folders/{folder['id']}").json() == {"success": True}
    assert api.get("/api/folders").json() == {"folders": []}


def test_internal_endpoints_are_not_reachable_publicly(stack, tenant) -> None:
    for path in ("/internal/v1/principal", "/internal/v1/orgs/x/folders", "/metrics"):
        assert_error(tenant.api.get(path), 404, "not_found")
        assert httpx.get(stack.url("cdn") + path).status_code == 404


def test_cdn_serves_nothing_but_downloads(stack) -> None:
    for path in ("/docs", "/openapi.json", "/metrics", "/internal/v1/sign", "/api/assets"):
        assert httpx.get(stack.public_cdn_url + path).status_code == 404


def test_deleted_key_is_refused_within_five_seconds(tenant, admin) -> None:
    """On the default settings: the bound is the contract's (the rules are tested in process)."""

    def folders(api: httpx.Client) -> httpx.Response:
        return api.get("/api/folders")

    assert folders(tenant.api).status_code == 200  # now cached at edge
    admin("delete-key", tenant.key_id)
    deleted_at = time.monotonic()
    while folders(tenant.api).status_code == 200:
        assert time.monotonic() - deleted_at < 5.5, "deleted key still accepted after 5 s"
        time.sleep(0.1)
    assert_error(folders(tenant.api), 401, "unauthorized")
