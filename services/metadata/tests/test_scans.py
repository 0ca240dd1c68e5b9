"""The malware scan queue (issue 48), SQLite and PostgreSQL: an upload committed with a pending
scan is queued in its own transaction; a claim leases it (a second claim gets nothing until the
lease ends); a retry puts it back later; a result ends it once, with its events in the outbox,
and a result sent again changes nothing."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlmodel import Session

from coffer_kit.contract.ids import new_id
from coffer_kit.contract.wire import SYSTEM
from coffer_kit.db.engine import writer
from coffer_metadata import trash as T
from coffer_testkit.testing import commit_asset

from .support import sent_behind
from .test_events import pending

pytestmark = pytest.mark.anyio


async def claim(api: httpx.AsyncClient, lease: float = 60) -> dict[str, Any]:
    answer = await api.post("/internal/v1/scans/claim", json={"limit": 10, "leaseSeconds": lease})
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


async def report(api: httpx.AsyncClient, org: str, asset_id: str, **body: Any) -> httpx.Response:
    return await api.post(f"/internal/v1/orgs/{org}/scans/{asset_id}", json=body)


async def test_a_pending_scan_is_claimed_leased_retried_and_ended_once(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    org = new_id("org")
    assert await claim(api) == {"jobs": [], "pending": 0}
    plain = (await commit_asset(api, org, name="plain.txt")).json()
    assert (plain["scanStatus"], plain["detectedType"]) == (None, None)  # scanning off: not queued
    asset = (
        await commit_asset(api, org, name="x.txt", scanStatus="pending", detectedType="text/plain")
    ).json()
    assert (asset["scanStatus"], asset["detectedType"], asset["scanSignature"]) == (
        "pending",
        "text/plain",
        None,
    )

    claimed = await claim(api)
    assert claimed["pending"] == 1
    assert claimed["jobs"] == [
        {"assetId": asset["id"], "organizationId": org, "key": asset["key"], "attempts": 0}
    ]
    assert (await claim(api))["jobs"] == []  # leased

    retried = await report(api, org, asset["id"], status="retry", retrySeconds=0)
    assert retried.json()["scanStatus"] == "pending"
    again = await claim(api)
    assert [(j["assetId"], j["attempts"]) for j in again["jobs"]] == [(asset["id"], 1)]

    assert (await report(api, new_id("org"), asset["id"], status="clean")).status_code == 404  # not theirs
    ended = await report(api, org, asset["id"], status="infected", signature="Coffer.Test.EICAR.UNOFFICIAL")
    assert ended.status_code == 200, ended.text
    assert (ended.json()["scanStatus"], ended.json()["scanSignature"]) == (
        "infected",
        "Coffer.Test.EICAR.UNOFFICIAL",
    )
    resent = await report(api, org, asset["id"], status="clean")
    assert resent.json()["scanStatus"] == "infected"  # ended already: nothing changes
    assert await claim(api) == {"jobs": [], "pending": 0}
    shown = (await api.get(f"/internal/v1/orgs/{org}/assets/{asset['id']}")).json()
    assert shown["scanStatus"] == "infected"

    events = [(e["type"], e["data"]["id"], e["data"]["scanStatus"]) for e in await pending(api)]
    # (Both in one transaction, at the same time: in either order.)
    assert sorted(events[-2:]) == [
        ("asset.infected", asset["id"], "infected"),
        ("asset.scanned", asset["id"], "infected"),
    ]
    with engine.connect() as db:
        due = db.execute(text("SELECT scan_due_at FROM assets WHERE id = :id"), {"id": asset["id"]}).scalar()
    assert due is None


async def test_unscanned_and_clean_end_the_scan_without_an_infected_event(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    ids = [(await commit_asset(api, org, name=f"{n}.txt", scanStatus="pending")).json()["id"] for n in "ab"]
    await claim(api)
    assert (await report(api, org, ids[0], status="clean")).json()["scanStatus"] == "clean"
    assert (await report(api, org, ids[1], status="unscanned")).json()["scanStatus"] == "unscanned"
    types = [e["type"] for e in await pending(api) if e["data"]["id"] in ids]
    assert types.count("asset.scanned") == 2 and "asset.infected" not in types
    bad = await report(api, org, ids[0], status="maybe")
    assert bad.status_code == 400


async def test_a_result_for_an_asset_trashed_meanwhile_is_kept_for_its_restore(
    api: httpx.AsyncClient,
) -> None:
    """blob holds an infected object before it reports; a result for an asset trashed while it
    was scanned was a 404 and lost, and its restore then said pending (and released the hold)."""
    org = new_id("org")
    asset = (await commit_asset(api, org, name="eicar.com", scanStatus="pending")).json()
    assert (await claim(api))["jobs"][0]["assetId"] == asset["id"]
    trashed = await api.post(
        f"/internal/v1/orgs/{org}/assets/{asset['id']}/trash", json={"retentionDays": 7, "limitBytes": 10**9}
    )
    assert trashed.status_code == 200, trashed.text
    found = await report(api, org, asset["id"], status="infected", signature="Eicar-Signature")
    assert found.status_code == 200, found.text
    assert (found.json()["scanStatus"], found.json()["scanSignature"]) == ("infected", "Eicar-Signature")
    assert (await report(api, org, asset["id"], status="clean")).json()["scanStatus"] == "infected"  # once
    restored = await api.post(
        f"/internal/v1/orgs/{org}/trash/{asset['id']}/restore", json={"quotaBytes": 10**9}
    )
    assert restored.status_code == 200, restored.text
    assert (restored.json()["scanStatus"], restored.json()["scanSignature"]) == (
        "infected",
        "Eicar-Signature",
    )
    types = [e["type"] for e in await pending(api) if e["data"]["id"] == asset["id"]]
    assert types.count("asset.infected") == 1
    elsewhere = await report(api, new_id("org"), asset["id"], status="clean")
    assert elsewhere.status_code == 404  # another organization's id: as for no asset


async def test_the_assets_a_scan_mode_change_holds_or_releases(api: httpx.AsyncClient) -> None:
    """An organization's live assets still pending or unscanned, by id, page after page: not
    another organization's, not those whose scan ended otherwise, not the trashed."""
    org, other = new_id("org"), new_id("org")

    async def holds(org_id: str, after: str = "", limit: int = 500) -> list[tuple[str, str, str]]:
        answer = await api.get(
            f"/internal/v1/orgs/{org_id}/scan-holds", params={"after": after, "limit": limit}
        )
        assert answer.status_code == 200, answer.text
        return [(a["assetId"], a["key"], a["scanStatus"]) for a in answer.json()["assets"]]

    made = {
        name: (await commit_asset(api, org, name=f"{name}.txt", scanStatus=status)).json()
        for name, status in (
            ("a", "pending"),
            ("b", "pending"),
            ("c", "pending"),
            ("d", None),
            ("e", "pending"),
        )
    }
    await commit_asset(api, other, name="theirs.txt", scanStatus="pending")
    await claim(api)
    for name, status in (("b", "unscanned"), ("c", "clean"), ("e", "infected")):
        assert (await report(api, org, made[name]["id"], status=status)).status_code == 200
    trashed = (await commit_asset(api, org, name="trashed.txt", scanStatus="pending")).json()
    assert (
        await api.post(
            f"/internal/v1/orgs/{org}/assets/{trashed['id']}/trash",
            json={"retentionDays": 7, "limitBytes": 10**9},
        )
    ).status_code == 200

    expected = sorted((made[n]["id"], made[n]["key"], s) for n, s in (("a", "pending"), ("b", "unscanned")))
    assert await holds(org) == expected
    first = await holds(org, limit=1)
    assert first == expected[:1]
    assert await holds(org, after=first[0][0]) == expected[1:]
    assert await holds(org, after=expected[-1][0]) == []
    assert len(await holds(other)) == 1
    assert (await api.get(f"/internal/v1/orgs/{org}/scan-holds", params={"limit": 0})).status_code == 400


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)  # two writers at once
@pytest.mark.parametrize("move", ["restore", "trash"])
async def test_a_result_reported_as_its_asset_is_restored_or_trashed_is_recorded(
    api: httpx.AsyncClient, engine: Engine, move: str
) -> None:
    """The report read the row unlocked, then wrote it: a restore (or a trash) that moved the
    row between the two left the write nothing to update, a 500, and the result was lost. It
    now waits for the move, and records the result where the row went, with its event."""
    org = new_id("org")
    asset = (await commit_asset(api, org, name="x.txt", scanStatus="pending")).json()["id"]
    assert (await claim(api))["jobs"][0]["assetId"] == asset
    cdn = {"cdn_url": "http://cdn", "actor": SYSTEM}
    trash = {"retention_days": 7, "limit_bytes": 10**9, **cdn}
    if move == "restore":
        with Session(writer(engine)) as s:
            T.trash(s, org_id=org, asset_id=asset, **trash)
            s.commit()
    holder = Session(writer(engine))
    if move == "restore":
        T.restore(holder, org_id=org, asset_id=asset, quota_bytes=10**9, only_user=None, **cdn)
    else:
        T.trash(holder, org_id=org, asset_id=asset, **trash)
    holder.flush()
    answer = await sent_behind(engine, holder, lambda: report(api, org, asset, status="clean"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["scanStatus"] == "clean"
    if move == "trash":
        restored = await api.post(
            f"/internal/v1/orgs/{org}/trash/{asset}/restore", json={"quotaBytes": 10**9}
        )
        assert restored.status_code == 200, restored.text
    shown = (await api.get(f"/internal/v1/orgs/{org}/assets/{asset}")).json()
    assert shown["scanStatus"] == "clean"
    scanned = [e["data"]["scanStatus"] for e in await pending(api) if e["type"] == "asset.scanned"]
    assert scanned == ["clean"]
