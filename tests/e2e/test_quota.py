"""Quotas: 413 quota_exceeded, never exceeded under concurrent uploads, released by deletes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from coffer_kit.testing import assert_error

pytestmark = pytest.mark.e2e
KIB = 1024


def upload(api: httpx.Client, size: int) -> httpx.Response:
    return api.post("/api/assets", files={"file": ("f.bin", b"\0" * size, "application/octet-stream")})


def used(api: httpx.Client) -> int:
    listed = api.get("/api/assets", params={"limit": 100}).json()
    assert listed["total"] <= 100
    return sum(a["size"] for a in listed["assets"])


def test_upload_past_the_quota_is_413_with_details(new_tenant) -> None:
    tenant = new_tenant(quota_bytes=100 * KIB)
    assert upload(tenant.api, 60 * KIB).status_code == 201
    error = assert_error(upload(tenant.api, 50 * KIB), 413, "quota_exceeded")
    assert error["details"] == {"usedBytes": 60 * KIB, "quotaBytes": 100 * KIB, "requestedBytes": 50 * KIB}
    assert upload(tenant.api, 40 * KIB).status_code == 201  # exactly up to the quota is fine
    assert_error(upload(tenant.api, 1), 413, "quota_exceeded")
    assert used(tenant.api) == 100 * KIB


def test_deleting_releases_space(new_tenant) -> None:
    tenant = new_tenant(quota_bytes=100 * KIB)
    first = upload(tenant.api, 80 * KIB).json()
    assert_error(upload(tenant.api, 80 * KIB), 413, "quota_exceeded")
    assert tenant.api.delete(f"/api/assets/{first['id']}").status_code == 200
    assert upload(tenant.api, 80 * KIB).status_code == 201


def test_concurrent_uploads_never_exceed_the_quota(stack, new_tenant) -> None:
    quota = 1024 * KIB
    tenant = new_tenant(quota_bytes=quota)
    assert upload(tenant.api, 700 * KIB).status_code == 201  # 324 KiB left: room for three of 100 KiB

    def one(_: int) -> int:
        with httpx.Client(base_url=stack.edge_url, headers={"x-api-key": tenant.key}, timeout=60) as api:
            return upload(api, 100 * KIB).status_code

    with ThreadPoolExecutor(max_workers=24) as pool:
        statuses = list(pool.map(one, range(24)))
    assert statuses.count(201) == 3, statuses
    assert statuses.count(413) == 21, statuses
    assert used(tenant.api) == 1000 * KIB <= quota
