"""An organization's ingest rules (issue 48): owners change them, members and outsiders cannot,
bad values are refused and change nothing, it is audited, and edge gets them for an
organization (a resumable upload's completion)."""

from __future__ import annotations

import time

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


async def test_a_scan_mode_change_is_a_sync_job_ended_only_by_a_sync_of_the_current_mode(api: Api) -> None:
    """Issue 48: a change of the scan mode (not of the other rules) is due for edge's scan relay
    once it is ``settleSeconds`` old; a claim leases it; a sync of an older mode than the
    current one does not end it, whichever ends first."""
    owner = await api.register()
    org = await api.org(owner["token"], "Acme")
    other = await api.org(owner["token"], "Other")
    path = f"/orgs/{org['id']}/ingest"

    async def claim(settle: float = 0, lease: float = 600) -> list[dict[str, object]]:
        answer = await api.call(
            "POST", "/scan-syncs/claim", json={"settleSeconds": settle, "leaseSeconds": lease}
        )
        assert answer.status_code == 200, answer.text
        return answer.json()["syncs"]  # type: ignore[no-any-return]

    async def end(job: dict[str, object]) -> bool:
        body = {"generation": job["generation"], "leasedUntil": job["leasedUntil"]}
        answer = await api.call("POST", f"/orgs/{org['id']}/scan-sync/ended", json=body)
        assert answer.status_code == 200, answer.text
        return answer.json()["ended"]  # type: ignore[no-any-return]

    async def set_rules(**rules: str) -> None:
        assert (await api.call("PUT", path, token=owner["token"], json=rules)).status_code == 200

    assert await claim() == []
    await set_rules(ingestMode="enforce", scanMode="off")  # the scan mode unchanged: nothing due
    assert await claim() == []

    await set_rules(ingestMode="enforce", scanMode="block")
    assert await claim(settle=60) == []  # edge's cached rules have not caught up yet
    [first] = await claim()
    assert first["organizationId"] == org["id"] and first["scan"] == "block"
    assert await claim() == []  # leased

    # The mode changes while the first sync runs; a second one runs with it; the first, late,
    # ends after the second: the job is due again (the first may have written after it).
    await set_rules(ingestMode="enforce", scanMode="async")
    [second] = await claim()
    assert second["scan"] == "async" and second["generation"] != first["generation"]
    assert await end(second) is True
    assert await end(first) is False
    [third] = await claim()
    assert third["scan"] == "async"
    assert await end(third) is True
    assert await claim() == []

    # A late end while a sync of the newer mode runs leaves that one alone (no second edge
    # joins it); that sync then ends stale, and one more runs, alone, and ends it.
    await set_rules(ingestMode="enforce", scanMode="block")
    [older] = await claim()
    await set_rules(ingestMode="enforce", scanMode="async")
    [newer] = await claim()
    assert await end(older) is False
    assert await claim() == []  # the newer sync's lease holds
    assert await end(newer) is False
    [last] = await claim()
    assert last["scan"] == "async" and await end(last) is True
    assert await claim() == []

    # A lease that runs out gives the job back; the other organization never had one.
    await set_rules(ingestMode="enforce", scanMode="off")
    [leased] = await claim(lease=0.01)
    deadline = time.monotonic() + 5
    while not (claimed := await claim()):
        assert time.monotonic() < deadline, "the lease did not run out"
    [again] = claimed
    assert again["generation"] == leased["generation"] and again["organizationId"] != other["id"]
    assert await end(again) is True
    assert_error(
        await api.call("POST", "/scan-syncs/claim", json={"settleSeconds": -1, "leaseSeconds": 1}),
        400,
        "invalid_request",
    )
