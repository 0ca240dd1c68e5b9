"""Edge's expiry sweeper (issue 47) against the real apps in process, sweeping every second:
an expiry moved while the sweeper holds the object leaves the object served. (A restore's
clearing of a past expiry is metadata's rule: services/metadata/tests/test_trash.py.)"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from coffer_edge.clients.metadata import MetadataClient
from coffer_harness.api import Tenant
from coffer_harness.inprocess import API_TEST_SETTINGS, InProcessStack, new_stack, serving
from coffer_kit.contract.timeutil import isoformat, utcnow
from coffer_kit.contract.wire import Expired, ExpireIn
from coffer_testkit.pytest_plugin import new_database_url
from coffer_testkit.testing import TLS


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[InProcessStack]:
    """This module's own stack (conftest's, but its edge sweeps expiry every 0.5 to 1.5 s)."""
    root = tmp_path_factory.mktemp(f"expiry-{request.param}")
    s = new_stack(
        root,
        auth_database_url=new_database_url(request, request.param, root, "expiry_auth"),
        metadata_database_url=new_database_url(request, request.param, root, "expiry_metadata"),
    )
    with serving(s, secrets.token_urlsafe(24), **API_TEST_SETTINGS, edge_expiry_interval_seconds=1):
        yield s


def sweeps() -> float:
    return REGISTRY.get_sample_value("coffer_expiry_sweeps_total", {"outcome": "done"}) or 0.0


def wait_for(check: Any, what: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def keep_a_trash(api: httpx.Client) -> None:
    assert api.put("/api/trash/settings", json={"retentionDays": 3}).status_code == 200
    wait_for(lambda: api.get("/api/trash/settings").json()["retentionDays"] == 3, "retention not seen")


def soon() -> str:
    return isoformat(utcnow() + timedelta(seconds=1))


def test_an_expiry_moved_during_the_sweep_leaves_the_asset_served(
    tenant: Tenant, stack: InProcessStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = tenant.api
    keep_a_trash(api)
    later = isoformat(utcnow() + timedelta(days=1))
    expire = MetadataClient.expire
    moved: list[int] = []

    async def moved_first(self: MetadataClient, org_id: str, asset_id: str, body: ExpireIn) -> Expired:
        # The owner's PATCH lands after the sweeper held the object, before metadata expires it.
        headers = {"x-api-key": tenant.key}
        async with httpx.AsyncClient(base_url=stack.edge_url, headers=headers, verify=TLS) as client:
            patched = await client.patch(f"/api/assets/{asset_id}", json={"expiresAt": later})
        moved.append(patched.status_code)
        return await expire(self, org_id, asset_id, body)

    monkeypatch.setattr(MetadataClient, "expire", moved_first)
    asset = api.post("/api/assets", files={"file": ("r.txt", b"race")}, data={"expiresAt": soon()}).json()
    assert httpx.get(asset["publicUrl"], verify=TLS).status_code == 200
    wait_for(lambda: moved, "the sweeper never took the asset")
    assert moved == [200]
    wait_for(
        lambda: httpx.get(asset["publicUrl"], verify=TLS).status_code == 200,
        "the public URL stayed 404 after the sweep",
        seconds=5,
    )
    live = api.get(f"/api/assets/{asset['id']}")
    assert live.status_code == 200 and live.json()["expiresAt"] == later
    signed = api.get(f"/api/assets/{asset['id']}/url", params={"expiresIn": 600}).json()["url"]
    assert httpx.get(signed, verify=TLS).status_code == 200
    assert api.get("/api/trash").json()["total"] == 0


def test_a_due_asset_whose_object_is_missing_is_expired_all_the_same(
    tenant: Tenant, stack: InProcessStack
) -> None:
    """An expired asset whose object the store lost (the scrub's "missing"): blob's 404 on the
    trash's hold read as "another edge expired it first", so the row stayed due for ever, the
    first of every batch; a hundred of them stalled expiry and the trash's purge for every
    organization. There is nothing to hold back: the asset is expired as any other."""
    from coffer_blob.config import Settings as BlobSettings
    from coffer_blob.storage import make_driver

    api = tenant.api
    keep_a_trash(api)
    lost = api.post("/api/assets", files={"file": ("l.txt", b"lost")}, data={"expiresAt": soon()}).json()
    storage = make_driver(BlobSettings(data_dir=stack.data_dir))
    storage.delete(lost["key"])
    assert storage.stat(lost["key"]) is None
    wait_for(lambda: api.get(f"/api/assets/{lost['id']}").status_code == 404, "the lost asset never expired")
    trashed = api.get("/api/trash").json()
    assert [a["id"] for a in trashed["assets"]] == [lost["id"]]
