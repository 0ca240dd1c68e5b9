"""An organization's default visibility (CONTRACT §12): owners change it, members and
outsiders cannot, it is audited, and the principal edge caches carries it."""

from __future__ import annotations

import pytest

from coffer_testkit.testing import assert_error

from .support import Api, join

pytestmark = pytest.mark.anyio


async def test_owners_change_the_default_members_and_outsiders_cannot(api: Api) -> None:
    owner = await api.register()
    org = await api.org(owner["token"], "Acme")
    assert org["defaultVisibility"] == "public"
    member = await api.register()
    await join(api, owner, org["id"], member)
    outsider = await api.register()
    await api.org(outsider["token"], "Theirs")
    path = f"/orgs/{org['id']}/default-visibility"

    body = {"defaultVisibility": "private"}
    assert_error(await api.call("PUT", path, token=member["token"], json=body), 403, "forbidden")
    assert_error(await api.call("PUT", path, token=outsider["token"], json=body), 404, "not_found")
    for bad in ({"defaultVisibility": "hidden"}, {"defaultVisibility": None}, {}):
        assert_error(await api.call("PUT", path, token=owner["token"], json=bad), 400, "invalid_request")
    unchanged = await api.call("GET", f"/orgs/{org['id']}", token=member["token"])
    assert unchanged.json()["defaultVisibility"] == "public"

    changed = await api.call("PUT", path, token=owner["token"], json=body)
    assert changed.status_code == 200, changed.text
    assert changed.json()["defaultVisibility"] == "private"
    seen = await api.call("GET", f"/orgs/{org['id']}", token=member["token"])
    assert seen.json()["defaultVisibility"] == "private"
    log = (await api.call("GET", f"/orgs/{org['id']}/audit", token=owner["token"])).json()
    newest = log["events"][0]
    assert (newest["action"], newest["details"]) == (
        "org.default_visibility_changed",
        {"from": "public", "to": "private"},
    )
