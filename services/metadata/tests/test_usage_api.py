"""``usage`` against the real metadata app: it follows every commit and delete exactly."""

from __future__ import annotations

import httpx
import pytest

from coffer_kit.ids import new_id

pytestmark = pytest.mark.anyio


async def upload(api: httpx.AsyncClient, org: str, size: int, quota: int = 10**9) -> httpx.Response:
    asset_id = new_id("ast")
    assert (await api.post(f"/internal/v1/orgs/{org}/intents", json={"assetId": asset_id})).status_code == 201
    body = {
        "id": asset_id,
        "key": f"{org}/{asset_id}/f.bin",
        "filename": "f.bin",
        "mimeType": "application/octet-stream",
        "size": size,
        "sha256": "a" * 64,
        "quotaBytes": quota,
    }
    return await api.post(f"/internal/v1/orgs/{org}/assets", json=body)


async def test_usage_is_the_sum_of_live_sizes(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    assert (await api.get(f"/internal/v1/orgs/{org}/usage")).json() == {"usedBytes": 0, "assetCount": 0}
    ids = []
    for size in (10, 20, 30):
        response = await upload(api, org, size)
        assert response.status_code == 201
        ids.append(response.json()["id"])
    assert (await upload(api, org, 1000, quota=100)).status_code == 413
    assert (await api.post(f"/internal/v1/orgs/{org}/assets/{ids[1]}/tombstone")).status_code == 200
    usage = (await api.get(f"/internal/v1/orgs/{org}/usage")).json()
    assert usage == {"usedBytes": 40, "assetCount": 2}
    # Another organization's usage is its own.
    assert (await api.get(f"/internal/v1/orgs/{new_id('org')}/usage")).json()["usedBytes"] == 0
