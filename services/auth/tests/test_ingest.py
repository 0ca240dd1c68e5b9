"""An organization's ingest rules (issue 48): owners change them, members and outsiders cannot,
bad values are refused and change nothing, it is audited, and edge gets them for an
organization (a resumable upload's completion)."""

from __future__ import annotations

import pytest

from coffer_testkit.testing import assert_error

from .support import Api, join

pytestmark = pytest.mark.anyio


async def test_owners_change_the_ingest_rules_members_and_outsiders_cannot(api: Api) -> None:
    owner = await api.register()
    org = await api.org(owner["token"], "Acme")
    assert (org["ingestMode"], org["allowedTypes"], org["scanMode"]) == ("record", None, "off")
    member = await api.register()
    await join(api, owner, org["id"], member)
    outsider = await api.register()
    await api.org(outsider["token"], "Theirs")
    path = f"/orgs/{org['id']}/ingest"

    body = {"ingestMode": "enforce", "allowedTypes": "image/*, application/PDF", "scanMode": "block"}
    assert_error(await api.call("PUT", path, token=member["token"], json=body), 403, "forbidden")
    assert_error(await api.call("PUT", path, token=outsider["token"], json=body), 404, "not_found")
    for bad in (
        {**body, "ingestMode": "strict"},
        {**body, "scanMode": "sometimes"},
        {**body, "allowedTypes": "image/<script>"},
        {**body, "allowedTypes": ",".join(["image/png"] * 33)},
        {"ingestMode": "enforce"},
    ):
        assert_error(await api.call("PUT", path, token=owner["token"], json=bad), 400, "invalid_request")
    unchanged = await api.call("GET", f"/orgs/{org['id']}", token=member["token"])
    assert unchanged.json()["ingestMode"] == "record"

    changed = await api.call("PUT", path, token=owner["token"], json=body)
    assert changed.status_code == 200, changed.text
    shown = changed.json()
    assert (shown["ingestMode"], shown["allowedTypes"], shown["scanMode"]) == (
        "enforce",
        ["image/*", "application/pdf"],
        "block",
    )
    rules = await api.call("GET", f"/orgs/{org['id']}/ingest")
    expected = {"mode": "enforce", "allowedTypes": ["image/*", "application/pdf"], "scan": "block"}
    assert rules.json() == expected
    assert_error(await api.call("GET", "/orgs/org_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9/ingest"), 404, "not_found")
    log = (await api.call("GET", f"/orgs/{org['id']}/audit", token=owner["token"])).json()
    newest = log["events"][0]
    assert newest["action"] == "org.ingest_changed"
    assert newest["details"]["to"] == {
        "ingest_mode": "enforce",
        "allowed_types": ["image/*", "application/pdf"],
        "scan_mode": "block",
    }

    cleared = await api.call("PUT", path, token=owner["token"], json={**body, "allowedTypes": ""})
    assert cleared.json()["allowedTypes"] is None
