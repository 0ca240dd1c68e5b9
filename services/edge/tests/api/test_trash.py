"""The trash and expiry's rules at edge (issue 47), through the real apps in process: bad input
is 400 and changes nothing; the retention applies to deletes; a subtree key is kept out."""

from __future__ import annotations

import base64
import time
from datetime import timedelta
from typing import Any

from coffer_kit.contract.timeutil import isoformat, utcnow
from coffer_testkit.testing import assert_error

TUS = {"Tus-Resumable": "1.0.0"}


def _meta(**pairs: str) -> str:
    return ",".join(f"{k} {base64.b64encode(v.encode()).decode()}" for k, v in pairs.items())


def test_bad_expiries_and_retentions_are_400(tenant: Any) -> None:
    api = tenant.api
    for value in (
        "soon",
        "2020-01-01T00:00:00Z",
        "2026-12-01T00:00:00",
        isoformat(utcnow() + timedelta(days=4000)),
    ):
        refused = api.post("/api/assets", files={"file": ("a.txt", b"a")}, data={"expiresAt": value})
        assert_error(refused, 400, "invalid_request")
        tus = api.post(
            "/api/uploads/tus",
            headers={
                **TUS,
                "Upload-Length": "1",
                "Upload-Metadata": _meta(filename="a.txt", expiresAt=value),
            },
        )
        assert_error(tus, 400, "invalid_request")
    assert api.get("/api/assets").json()["total"] == 0
    assert api.get("/api/uploads").json()["total"] == 0
    asset = api.post("/api/assets", files={"file": ("a.txt", b"a")}).json()
    assert asset["expiresAt"] is None
    assert_error(api.patch(f"/api/assets/{asset['id']}", json={"expiresAt": "never"}), 400, "invalid_request")
    assert_error(api.get("/api/assets", params={"expiresBefore": "yesterday"}), 400, "invalid_request")
    for body in ({"retentionDays": -1}, {"retentionDays": 91}, {"retentionDays": "7"}, {}):
        assert_error(api.put("/api/trash/settings", json=body), 400, "invalid_request")
    assert_error(api.put("/api/trash/settings", data={"retentionDays": "7"}), 415, "unsupported_media_type")
    assert api.get("/api/trash/settings").json()["retentionDays"] == 0


def test_the_retention_decides_what_a_delete_does(tenant: Any, admin: Any) -> None:
    api = tenant.api
    first = api.post("/api/assets", files={"file": ("a.txt", b"aaaa")}).json()
    assert api.delete(f"/api/assets/{first['id']}").json() == {"success": True}
    assert api.get("/api/trash").json()["total"] == 0  # no retention: final, as before
    assert api.put("/api/trash/settings", json={"retentionDays": 3}).json()["retentionDays"] == 3
    # edge's principal cache (1 s here) may still hold 0: poll for the change.
    deadline = time.monotonic() + 5
    while api.get("/api/trash/settings").json()["retentionDays"] != 3:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    second = api.post("/api/assets", files={"file": ("b.txt", b"bbbbbb")}).json()
    api.delete(f"/api/assets/{second['id']}")
    page = api.get("/api/trash").json()
    assert [a["id"] for a in page["assets"]] == [second["id"]]
    assert page["assets"][0]["trashedBy"]["type"] == "key"
    usage = api.get("/api/usage").json()
    assert (usage["usedBytes"], usage["trashedBytes"], usage["trashedCount"]) == (0, 6, 1)
    third = api.post("/api/assets", files={"file": ("c.txt", b"c")}).json()
    assert api.delete(f"/api/assets/{third['id']}", params={"permanent": "true"}).status_code == 200
    assert api.get("/api/trash").json()["total"] == 1
    assert_error(
        api.delete(f"/api/assets/{third['id']}", params={"permanent": "maybe"}), 400, "invalid_request"
    )
    # A folder-confined key deletes into the trash but cannot open it.
    folder = api.post("/api/folders", json={"name": "box"}).json()["id"]
    boxed = admin("create-key", "--org", tenant.org_id, "--folder-id", folder)["key"]
    inside = api.post("/api/assets", files={"file": ("d.txt", b"d")}, data={"folderId": folder}).json()
    headers = {"x-api-key": boxed}
    assert api.delete(f"/api/assets/{inside['id']}", headers=headers).status_code == 200
    assert_error(api.get("/api/trash", headers=headers), 403, "forbidden")
    assert api.get("/api/trash/settings", headers=headers).status_code == 200  # as it reads the usage
    assert_error(api.post(f"/api/trash/{inside['id']}/restore", headers=headers), 403, "forbidden")
    assert api.get("/api/trash").json()["total"] == 2


def test_permanent_is_true_or_false_and_nothing_else(tenant: Any) -> None:
    """`permanent` other than `true`/`false` is 400 (docs/api.md): FastAPI's bool took
    `1`, `yes`, `on` and `t` for true, and deleted at once what the trash should have kept."""
    api = tenant.api
    assert api.put("/api/trash/settings", json={"retentionDays": 3}).status_code == 200
    deadline = time.monotonic() + 5  # (edge's principal cache may still hold 0)
    while api.get("/api/trash/settings").json()["retentionDays"] != 3:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    asset = api.post("/api/assets", files={"file": ("a.txt", b"a")}).json()["id"]
    for value in ("1", "yes", "on", "t", "True", "TRUE", "0", "no", "off", "f", "False", ""):
        refused = api.delete(f"/api/assets/{asset}", params={"permanent": value})
        assert "permanent" in assert_error(refused, 400, "invalid_request")["message"], value
    assert api.get(f"/api/assets/{asset}").status_code == 200  # neither deleted nor trashed
    assert api.delete(f"/api/assets/{asset}", params={"permanent": "false"}).status_code == 200
    assert [a["id"] for a in api.get("/api/trash").json()["assets"]] == [asset]


def test_an_expiry_set_at_upload_is_answered_and_listed(tenant: Any) -> None:
    api = tenant.api
    when = isoformat(utcnow() + timedelta(days=2))
    made = api.post("/api/assets", files={"file": ("a.txt", b"a")}, data={"expiresAt": when})
    assert made.status_code == 201, made.text
    assert made.json()["expiresAt"] == when
    assert api.get(f"/api/assets/{made.json()['id']}").json()["expiresAt"] == when
    listed = api.get("/api/assets", params={"expiresBefore": isoformat(utcnow() + timedelta(days=3))}).json()
    assert [a["id"] for a in listed["assets"]] == [made.json()["id"]]
    # A filter like the others: it pages by cursor, and combines with the rest.
    later = isoformat(utcnow() + timedelta(days=1))
    ids = [
        api.post("/api/assets", files={"file": (f"{n}.txt", b"x")}, data={"expiresAt": later}).json()["id"]
        for n in ("b", "c", "d")
    ]
    api.post("/api/assets", files={"file": ("never.txt", b"x")})
    soon = {"expiresBefore": isoformat(utcnow() + timedelta(days=1, hours=1))}
    first = api.get("/api/assets", params={**soon, "limit": 2, "total": "false"}).json()
    rest = api.get("/api/assets", params={**soon, "limit": 2, "cursor": first["nextCursor"]}).json()
    assert [a["id"] for a in first["assets"] + rest["assets"]] == ids[::-1] and rest["nextCursor"] is None
    by_name = api.get("/api/assets", params={**soon, "q": "c", "sort": "name"}).json()
    assert ([a["id"] for a in by_name["assets"]], by_name["total"]) == ([ids[1]], 1)
