"""A folder's default expiry (issue 47) against the real metadata app, on both databases (on
PostgreSQL through the upload commit's event-loop path): an upload into the folder without
its own ``expiresAt`` takes the commit's time plus the default, its own wins, a bad default is
400 naming the field, and subfolders do not inherit it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

from coffer_kit.contract.ids import new_id
from coffer_kit.contract.timeutil import isoformat, utcnow
from coffer_testkit.testing import commit_asset

pytestmark = pytest.mark.anyio


def _when(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def upload(api: httpx.AsyncClient, org: str, **fields: Any) -> dict[str, Any]:
    response = await commit_asset(api, org, size=3, **fields)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_an_upload_into_a_folder_takes_its_default_expiry(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    folders = f"/internal/v1/orgs/{org}/folders"
    made = await api.post(folders, json={"name": "month", "expiryDays": 30})
    assert made.status_code == 201 and made.json()["expiryDays"] == 30
    folder = made.json()["id"]
    child = (await api.post(folders, json={"name": "inner", "parentId": folder})).json()
    assert child["expiryDays"] is None
    listed = (await api.get(folders)).json()["folders"]
    assert [(f["id"], f["expiryDays"]) for f in listed] == [(folder, 30)]

    before = utcnow()
    asset = await upload(api, org, folderId=folder)
    after = utcnow()
    expires = _when(asset["expiresAt"])
    assert before + timedelta(days=30) - timedelta(milliseconds=1) <= expires <= after + timedelta(days=30)
    assert _when(asset["createdAt"]) + timedelta(days=30) == expires
    stored = (await api.get(f"/internal/v1/orgs/{org}/assets/{asset['id']}")).json()
    assert stored["expiresAt"] == asset["expiresAt"]
    created = [
        e
        for e in (await api.get("/internal/v1/events/audit-pending?limit=500")).json()["events"]
        if e["type"] == "asset.created" and e["data"]["id"] == asset["id"]
    ]
    assert [e["data"]["expiresAt"] for e in created] == [asset["expiresAt"]]

    # Its own expiresAt wins; the root and a subfolder (not inherited) give none.
    own = isoformat(utcnow() + timedelta(hours=2))
    assert (await upload(api, org, folderId=folder, expiresAt=own))["expiresAt"] == own
    assert (await upload(api, org))["expiresAt"] is None
    assert (await upload(api, org, folderId=child["id"]))["expiresAt"] is None

    # Cleared with PATCH (its event says what it was): later uploads get none.
    cleared = await api.patch(f"{folders}/{folder}", json={"expiryDays": None})
    assert cleared.status_code == 200 and cleared.json()["expiryDays"] is None
    assert cleared.json()["name"] == "month"
    assert (await upload(api, org, folderId=folder))["expiresAt"] is None
    assert (
        stored["expiresAt"]
        == (await api.get(f"/internal/v1/orgs/{org}/assets/{asset['id']}")).json()["expiresAt"]
    )
    updated = [
        e
        for e in (await api.get("/internal/v1/events/audit-pending?limit=500")).json()["events"]
        if e["type"] == "folder.updated"
    ]
    assert [e["changes"] for e in updated] == [{"expiryDays": 30}]
    set_again = await api.patch(f"{folders}/{folder}", json={"expiryDays": 1})
    assert set_again.json()["expiryDays"] == 1
    assert _when((await upload(api, org, folderId=folder))["expiresAt"]) > utcnow() + timedelta(hours=23)


async def test_a_bad_default_expiry_is_400_naming_the_field(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    folders = f"/internal/v1/orgs/{org}/folders"
    folder = (await api.post(folders, json={"name": "f"})).json()["id"]
    for value in (0, -1, 3651, "7", 7.5, True, [], {"days": 1}):
        made = await api.post(folders, json={"name": "g", "expiryDays": value})
        assert made.status_code == 400, value
        assert made.json()["error"]["details"]["field"] == "expiryDays", made.text
        patched = await api.patch(f"{folders}/{folder}", json={"expiryDays": value})
        assert patched.status_code == 400, value
        assert patched.json()["error"]["details"]["field"] == "expiryDays", patched.text
    assert [f["name"] for f in (await api.get(folders)).json()["folders"]] == ["f"]
    assert (await api.get(f"{folders}/{folder}")).json()["expiryDays"] is None
    assert (await api.post(folders, json={"name": "max", "expiryDays": 3650})).status_code == 201
