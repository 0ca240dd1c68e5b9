"""A folder's default expiry (issue 47) at edge, through the real apps in process: set at
creation and with PATCH by whoever may rename the folder (an owner's and a member's personal
keys alike, a read-only key not), never by another organization; an upload by the form or tus
into the folder takes it; bad values are 400 naming the field."""

from __future__ import annotations

import base64
import secrets
from datetime import datetime, timedelta
from typing import Any

import httpx

from coffer_kit.contract.ids import new_id
from coffer_kit.contract.timeutil import utcnow
from coffer_testkit.testing import assert_error

TUS = {"Tus-Resumable": "1.0.0"}


def _when(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _personal_key(admin: Any, org: str, role: str) -> str:
    user = admin(
        "create-user",
        "--email",
        f"{new_id('u')[-8:].lower()}@example.com",
        "--password",
        "pw-" + secrets.token_urlsafe(18),
    )
    admin("add-member", "--org", org, "--user", user["id"], "--role", role)
    return str(admin("create-key", "--org", org, "--user", user["id"])["key"])


def test_a_folder_default_expiry_is_set_by_who_may_rename_and_applies_to_uploads(
    tenant: Any, new_tenant: Any, admin: Any, stack: Any
) -> None:
    api = tenant.api
    made = api.post("/api/folders", json={"name": "month", "expiryDays": 30})
    assert made.status_code == 201 and made.json()["expiryDays"] == 30
    folder = made.json()["id"]
    assert [f["expiryDays"] for f in api.get("/api/folders").json()["folders"]] == [30]
    assert api.get(f"/api/folders/{folder}").json()["expiryDays"] == 30

    asset = api.post("/api/assets", files={"file": ("a.txt", b"a")}, data={"folderId": folder}).json()
    assert _when(asset["expiresAt"]) == _when(asset["createdAt"]) + timedelta(days=30)
    meta = ",".join(
        f"{k} {base64.b64encode(v.encode()).decode()}"
        for k, v in {"filename": "t.txt", "folderId": folder}.items()
    )
    created = api.post("/api/uploads/tus", headers={**TUS, "Upload-Length": "1", "Upload-Metadata": meta})
    assert created.status_code == 201, created.text
    done = api.patch(
        created.headers["location"],
        content=b"t",
        headers={**TUS, "Upload-Offset": "0", "Content-Type": "application/offset+octet-stream"},
    )
    assert done.status_code == 204, done.text
    tus_asset = next(
        a
        for a in api.get("/api/assets", params={"folderId": folder}).json()["assets"]
        if a["name"] == "t.txt"
    )
    assert _when(tus_asset["expiresAt"]) > utcnow() + timedelta(days=29)

    def client(key: str) -> httpx.Client:
        return httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key}, timeout=30)

    owner, member = (
        _personal_key(admin, tenant.org_id, "owner"),
        _personal_key(admin, tenant.org_id, "member"),
    )
    read_only = admin("create-key", "--org", tenant.org_id, "--scope", "read-only")["key"]
    other = new_tenant("Other").api
    with client(owner) as by_owner, client(member) as by_member, client(read_only) as by_reader:
        assert by_owner.patch(f"/api/folders/{folder}", json={"expiryDays": 7}).json()["expiryDays"] == 7
        assert by_member.patch(f"/api/folders/{folder}", json={"expiryDays": 1}).json()["expiryDays"] == 1
        assert_error(
            by_reader.patch(f"/api/folders/{folder}", json={"expiryDays": 2}), 403, "insufficient_scope"
        )
    assert_error(other.patch(f"/api/folders/{folder}", json={"expiryDays": 2}), 403, "forbidden")
    assert_error(other.patch(f"/api/folders/fld_{'0' * 26}", json={"expiryDays": 2}), 404, "not_found")
    for value in (0, 3651, "7", 1.5, True):
        for refused in (
            api.post("/api/folders", json={"name": "bad", "expiryDays": value}),
            api.patch(f"/api/folders/{folder}", json={"expiryDays": value}),
        ):
            assert_error(refused, 400, "invalid_request")
            assert refused.json()["error"]["details"]["field"] == "expiryDays", refused.text
    assert api.get(f"/api/folders/{folder}").json()["expiryDays"] == 1
    cleared = api.patch(f"/api/folders/{folder}", json={"expiryDays": None})
    assert cleared.status_code == 200 and cleared.json()["expiryDays"] is None
    plain = api.post("/api/assets", files={"file": ("b.txt", b"b")}, data={"folderId": folder}).json()
    assert plain["expiresAt"] is None
    schema = api.get("/api/openapi.json").json()["components"]["schemas"]
    assert {"Folder", "FolderCreate", "FolderUpdate"} <= schema.keys()
    for name in ("Folder", "FolderCreate", "FolderUpdate"):
        assert "expiryDays" in schema[name]["properties"], name
