"""Quotas: 413 quota_exceeded with its details, and space released by deletes (in process)."""

from __future__ import annotations

from coffer_testkit.api import upload_zeros, used_bytes
from coffer_testkit.testing import assert_error

KIB = 1024


def test_upload_past_the_quota_is_413_with_details(new_tenant) -> None:
    tenant = new_tenant(quota_bytes=100 * KIB)
    assert upload_zeros(tenant.api, 60 * KIB).status_code == 201
    error = assert_error(upload_zeros(tenant.api, 50 * KIB), 413, "quota_exceeded")
    assert error["details"] == {"usedBytes": 60 * KIB, "quotaBytes": 100 * KIB, "requestedBytes": 50 * KIB}
    assert upload_zeros(tenant.api, 40 * KIB).status_code == 201  # exactly up to the quota is fine
    assert_error(upload_zeros(tenant.api, 1), 413, "quota_exceeded")
    assert used_bytes(tenant.api) == 100 * KIB


def test_deleting_releases_space(new_tenant) -> None:
    tenant = new_tenant(quota_bytes=100 * KIB)
    first = upload_zeros(tenant.api, 80 * KIB).json()
    assert_error(upload_zeros(tenant.api, 80 * KIB), 413, "quota_exceeded")
    assert tenant.api.delete(f"/api/assets/{first['id']}").status_code == 200
    assert upload_zeros(tenant.api, 80 * KIB).status_code == 201
