"""Webhook routes' own rules at edge (CONTRACT §11), through edge and metadata in process: bodies
validated into the contract's envelope, JSON required where a body is sent and none where
it is not, the secret shown at creation and rotation only, the folder filter checked."""

from __future__ import annotations

from typing import Any

from coffer_testkit.testing import assert_error

HOOK = {"url": "https://93.184.215.34/hook", "events": ["asset.created", "folder.deleted"]}


def test_create_get_update_and_delete(tenant: Any) -> None:
    api = tenant.api
    created = api.post("/api/webhooks", json={**HOOK, "description": "CI"})
    assert created.status_code == 201, created.text
    endpoint = created.json()
    assert endpoint["id"].startswith("whk_") and endpoint["secret"].startswith("whsec_")
    assert (endpoint["enabled"], endpoint["folderId"], endpoint["disabledReason"]) == (True, None, None)
    assert endpoint["events"] == sorted(HOOK["events"])
    path = f"/api/webhooks/{endpoint['id']}"
    shown = api.get(path).json()
    assert "secret" not in shown and shown["description"] == "CI"
    paused = api.patch(path, json={"enabled": False, "description": None}).json()
    assert (paused["enabled"], paused["disabledReason"], paused["description"]) == (False, "paused", None)
    assert_error(api.post(f"{path}/test"), 409, "conflict")
    resumed = api.patch(path, json={"enabled": True}).json()
    assert (resumed["enabled"], resumed["disabledReason"]) == (True, None)
    rotated = api.post(f"{path}/rotate-secret")  # no body, no Content-Type: not a 415
    assert rotated.status_code == 200 and rotated.json()["secret"] != endpoint["secret"]
    assert api.get(f"{path}/deliveries").json() == {
        **{"deliveries": [], "total": 0, "limit": 50, "offset": 0},
        "nextCursor": None,
    }
    assert api.delete(path).json() == {"success": True}
    assert_error(api.get(path), 404, "not_found")


def test_bad_bodies_are_400_or_415(tenant: Any) -> None:
    api = tenant.api
    for body in (
        {"url": HOOK["url"], "events": []},
        {"url": HOOK["url"], "events": ["asset.exploded"]},
        {"url": HOOK["url"], "events": ["ping"]},
        {"url": "", "events": HOOK["events"]},
        {"url": "https://" + "a" * 2100 + ".com/", "events": HOOK["events"]},
        {"url": HOOK["url"], "events": HOOK["events"], "description": "d" * 501},
        {"events": HOOK["events"]},
    ):
        assert_error(api.post("/api/webhooks", json=body), 400, "invalid_request")
    assert_error(api.post("/api/webhooks", data={"url": HOOK["url"]}), 415, "unsupported_media_type")
    endpoint = api.post("/api/webhooks", json=HOOK).json()
    path = f"/api/webhooks/{endpoint['id']}"
    assert_error(api.patch(path, json={}), 400, "invalid_request")
    assert_error(api.patch(path, json={"url": None}), 400, "invalid_request")
    assert_error(api.patch(path, json={"url": "https://10.0.0.7/"}), 400, "invalid_request")
    assert_error(api.get("/api/webhooks/whk_nope"), 404, "not_found")
    assert_error(api.get(f"{path}/deliveries", params={"limit": 0}), 400, "invalid_request")
    far = api.get(f"{path}/deliveries", params={"offset": 100_000})  # the largest offset (issue 49)
    assert far.status_code == 200 and far.json()["deliveries"] == []
    assert_error(api.post(f"{path}/deliveries/whd_nope/redeliver"), 404, "not_found")


def test_the_folder_filter_must_be_the_organizations(tenant: Any, new_tenant: Any) -> None:
    other = new_tenant("Other")
    theirs = other.api.post("/api/folders", json={"name": "Theirs"}).json()
    assert_error(tenant.api.post("/api/webhooks", json={**HOOK, "folderId": theirs["id"]}), 403, "forbidden")
    assert_error(
        tenant.api.post("/api/webhooks", json={**HOOK, "folderId": "fld_01JD0000000000000000000000"}),
        404,
        "not_found",
    )
    ours = tenant.api.post("/api/folders", json={"name": "Ours"}).json()
    created = tenant.api.post("/api/webhooks", json={**HOOK, "folderId": ours["id"]})
    assert created.status_code == 201 and created.json()["folderId"] == ours["id"]
    cleared = tenant.api.patch(f"/api/webhooks/{created.json()['id']}", json={"folderId": None}).json()
    assert cleared["folderId"] is None
