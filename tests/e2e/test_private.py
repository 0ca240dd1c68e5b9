"""Private assets (CONTRACT §12) over real processes, on both backends (the filesystem driver
with SQLite, the S3 driver with PostgreSQL and Redis): publicUrl null, the bare key 404, the
signed URL 200, a signed URL with its query stripped 404, a switch to private refused by the
CDN within 5 s and back, the organization's default, and a delete. The rules one service
enforces are tested in process (services/edge/tests/api/test_private.py,
services/blob/tests/test_private.py)."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from coffer_testkit.testing import assert_error, pattern_bytes

pytestmark = pytest.mark.e2e

SWITCH_SECONDS = 5.0  # CONTRACT §12


def bare_url(stack, asset: dict[str, Any]) -> str:
    return (
        stack.public_cdn_url.rstrip("/") + "/" + "/".join(quote(s, safe="") for s in asset["key"].split("/"))
    )


def signed(api: httpx.Client, asset: dict[str, Any]) -> str:
    return api.get(f"/api/assets/{asset['id']}/url", params={"expiresIn": 600}).json()["url"]  # type: ignore[no-any-return]


def until(url: str, status: int) -> float:
    """Poll the CDN until ``url`` answers ``status``; the seconds it took (at most 5)."""
    started = time.monotonic()
    while (answer := httpx.get(url).status_code) != status:
        assert time.monotonic() - started < SWITCH_SECONDS, f"{url} still answers {answer}"
        time.sleep(0.05)
    return time.monotonic() - started


@pytest.mark.parametrize("size", [4_000, 300_000], ids=["small", "streamed"])
def test_private_upload_switch_and_delete(stack, tenant, size: int) -> None:
    api = tenant.api
    data = pattern_bytes(size)
    created = api.post("/api/assets", files={"file": ("plan.bin", data)}, data={"visibility": "private"})
    assert created.status_code == 201, created.text
    asset = created.json()
    assert (asset["visibility"], asset["publicUrl"]) == ("private", None)
    assert_error(httpx.get(bare_url(stack, asset)), 404, "not_found")
    url = signed(api, asset)
    response = httpx.get(url)
    assert (response.status_code, response.content) == (200, data)
    assert response.headers["cache-control"].startswith("private, ")
    assert_error(httpx.get(url.split("?", 1)[0]), 404, "not_found")

    public = api.patch(f"/api/assets/{asset['id']}", json={"visibility": "public"})
    assert public.status_code == 200, public.text
    assert public.json()["publicUrl"] == bare_url(stack, asset)
    until(public.json()["publicUrl"], 200)
    assert httpx.get(public.json()["publicUrl"]).content == data
    private = api.patch(f"/api/assets/{asset['id']}", json={"visibility": "private"})
    assert private.json()["publicUrl"] is None
    until(bare_url(stack, asset), 404)
    assert httpx.get(url).content == data  # the signed URL never stopped working

    assert api.delete(f"/api/assets/{asset['id']}").json() == {"success": True}
    assert httpx.get(url).status_code == 404


def test_the_organizations_default(stack, admin, tenant) -> None:
    admin("set-default-visibility", "--org", tenant.org_id, "--visibility", "private")
    deadline = time.monotonic() + SWITCH_SECONDS  # edge's auth cache: at most 5 s
    while True:
        asset = tenant.api.post("/api/assets", files={"file": ("d.txt", b"default")}).json()
        if asset["visibility"] == "private":
            break
        assert time.monotonic() < deadline, "the organization's default did not apply"
        time.sleep(0.2)
    assert asset["publicUrl"] is None
    assert_error(httpx.get(bare_url(stack, asset)), 404, "not_found")
    assert httpx.get(signed(tenant.api, asset)).content == b"default"
    listed = tenant.api.get("/api/assets", params={"visibility": "private"}).json()
    assert asset["id"] in [a["id"] for a in listed["assets"]]
