"""Quotas over real processes: never exceeded under concurrent uploads."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from coffer_harness.api import upload_zeros, used_bytes

pytestmark = pytest.mark.e2e
KIB = 1024


def test_concurrent_uploads_never_exceed_the_quota(stack, new_tenant) -> None:
    quota = 1024 * KIB
    tenant = new_tenant(quota_bytes=quota)
    assert upload_zeros(tenant.api, 700 * KIB).status_code == 201  # 324 KiB left: room for three of 100 KiB

    def one(_: int) -> int:
        with httpx.Client(base_url=stack.edge_url, headers={"x-api-key": tenant.key}, timeout=60) as api:
            return upload_zeros(api, 100 * KIB).status_code

    with ThreadPoolExecutor(max_workers=24) as pool:
        statuses = list(pool.map(one, range(24)))
    assert statuses.count(201) == 3, statuses
    assert statuses.count(413) == 21, statuses
    assert used_bytes(tenant.api) == 1000 * KIB <= quota
