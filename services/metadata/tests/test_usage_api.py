"""``usage`` against the real metadata app: it follows every commit and delete exactly."""

from __future__ import annotations

import httpx
import pytest

from coffer_kit.contract.ids import new_id
from coffer_testkit.testing import commit_asset

pytestmark = pytest.mark.anyio


async def upload(api: httpx.AsyncClient, org: str, size: int, quota: int = 10**9) -> httpx.Response:
    return await commit_asset(api, org, size=size, quota=quota)


async def test_usage_is_the_sum_of_live_sizes(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    assert (await api.get(f"/internal/v1/orgs/{org}/usage")).json() == {
        "usedBytes": 0,
        "assetCount": 0,
        "trashedBytes": 0,
        "trashedCount": 0,
    }
    ids = []
    for size in (10, 20, 30):
        response = await upload(api, org, size)
        assert response.status_code == 201
        ids.append(response.json()["id"])
    assert (await upload(api, org, 1000, quota=100)).status_code == 413
    assert (await api.post(f"/internal/v1/orgs/{org}/assets/{ids[1]}/tombstone")).status_code == 200
    usage = (await api.get(f"/internal/v1/orgs/{org}/usage")).json()
    assert usage == {"usedBytes": 40, "assetCount": 2, "trashedBytes": 0, "trashedCount": 0}
    # Another organization's usage is its own.
    assert (await api.get(f"/internal/v1/orgs/{new_id('org')}/usage")).json()["usedBytes"] == 0
