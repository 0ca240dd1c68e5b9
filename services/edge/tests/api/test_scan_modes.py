"""A change of an organization's scan mode holds or releases the files stored before it (issue
48), on both databases: an ``unscanned`` file is served after leaving ``block`` and held again
on coming back to it; a file still ``pending`` under ``block`` is served once the mode is
``async``, and quarantined when its scan then finds it infected; another organization's held
file stays held.

These stacks have no clamd: blob's scan is replaced by one the test decides (a file it cannot
read ends ``unscanned``; an infected one is held by blob as blob's own scan does). Scanning
over real processes and a real clamd: tests/e2e/test_scan.py."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest

from coffer_edge.clients.blob import BlobClient
from coffer_edge.clients.metadata import MetadataClient
from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.wire import ScanOutcome, ScanReport
from coffer_testkit.testing import TLS, assert_error

# The relay's turn (1 s), the settle after a change (the auth cache, 0.25 s, and 1 s), and margin.
SYNCED_WITHIN = 10.0
INFECTED, CLEAN = "infected.txt", "clean.txt"


class Scanner:
    """Stands in for blob's clamd: a file named ``INFECTED`` is found infected once ``opened``,
    one named ``CLEAN`` clean at once (blob holds or releases it first, as its scan does); any
    other cannot be read (``unscanned``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.opened, self.cleaned = threading.Event(), threading.Event()

        async def scan(client: BlobClient, key: str, *, timeout: float) -> ScanOutcome:  # noqa: ARG001
            if key.endswith("/" + CLEAN):
                await client.set_held(key, False, request_id="")
                self.cleaned.set()
                return ScanOutcome(result="clean", size=1, seconds=0)
            if not key.endswith("/" + INFECTED):
                raise CofferError(404, "not_found", "The scanner could not read it.")
            await until(self.opened)
            await client.set_held(key, True, request_id="")
            return ScanOutcome(result="infected", signature="Coffer-Test-Signature", size=1, seconds=0)

        monkeypatch.setattr(BlobClient, "scan", scan)


async def until(event: threading.Event) -> None:
    while not event.is_set():  # the services share this loop: wait without blocking it
        await asyncio.sleep(0.01)


def upload(api: httpx.Client, name: str) -> dict[str, Any]:
    answer = api.post("/api/assets", files={"file": (name, b"bytes of " + name.encode(), "text/plain")})
    assert answer.status_code == 201, answer.text
    return answer.json()  # type: ignore[no-any-return]


def scan_mode(admin: Any, tenant: Any, mode: str) -> None:
    """Set the mode, then wait until edge's cached rules have it (an upload says so)."""
    admin("set-ingest", "--org", tenant.org_id, "--scan", mode)
    deadline = time.monotonic() + 5
    while (upload(tenant.api, "probe.txt")["scanStatus"] == "pending") != (mode != "off"):
        assert time.monotonic() < deadline, "the scan mode did not reach edge"


def within(what: str, check: Any, seconds: float = SYNCED_WITHIN) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not {what} after {seconds} s"
        time.sleep(0.05)


def served(asset: dict[str, Any]) -> bool:
    return httpx.get(asset["publicUrl"], verify=TLS).status_code == 200


def status(tenant: Any, asset: dict[str, Any]) -> str:
    return tenant.api.get(f"/api/assets/{asset['id']}").json()["scanStatus"]  # type: ignore[no-any-return]


def test_an_unscanned_file_follows_its_organizations_scan_mode(
    monkeypatch: pytest.MonkeyPatch, admin: Any, new_tenant: Any
) -> None:
    Scanner(monkeypatch)
    tenant, bystander = new_tenant("Acme"), new_tenant("Bystander")
    for who in (tenant, bystander):
        scan_mode(admin, who, "block")
    late, theirs = upload(tenant.api, "late.txt"), upload(bystander.api, "theirs.txt")
    within("unscanned", lambda: status(tenant, late) == status(bystander, theirs) == "unscanned")
    assert not served(late) and not served(theirs)

    scan_mode(admin, tenant, "async")
    within("served after leaving block", lambda: served(late))
    signed = tenant.api.get(f"/api/assets/{late['id']}/url")
    assert signed.status_code == 200 and httpx.get(signed.json()["url"], verify=TLS).status_code == 200
    assert not served(theirs)  # another organization's mode did not change

    scan_mode(admin, tenant, "block")
    within("held again under block", lambda: not served(late))
    assert_error(tenant.api.get(f"/api/assets/{late['id']}/url"), 409, "not_scanned")
    assert status(tenant, late) == "unscanned"


def test_a_pending_file_is_served_under_async_until_its_scan_finds_it_infected(
    monkeypatch: pytest.MonkeyPatch, admin: Any, tenant: Any
) -> None:
    scanner = Scanner(monkeypatch)
    scan_mode(admin, tenant, "block")
    waiting = upload(tenant.api, INFECTED)
    assert status(tenant, waiting) == "pending" and not served(waiting)

    scan_mode(admin, tenant, "async")
    within("served while pending under async", lambda: served(waiting))
    assert status(tenant, waiting) == "pending"

    scanner.opened.set()
    within("quarantined", lambda: status(tenant, waiting) == "infected")
    assert not served(waiting)
    assert_error(tenant.api.get(f"/api/assets/{waiting['id']}/url"), 409, "quarantined")


def test_a_file_restored_from_the_trash_takes_the_mode_of_the_moment(
    monkeypatch: pytest.MonkeyPatch, admin: Any, tenant: Any
) -> None:
    """An ``unscanned`` file served under ``async``, trashed, then ``block`` set, its sync
    (which sees live files only) long done: the restore released the trash's hold and never set
    the scan's, so the file was served unscanned under ``block``. It is now held back, as
    docs/api.md says: a trashed file takes the mode of the moment it is restored."""
    Scanner(monkeypatch)
    scan_mode(admin, tenant, "async")
    late = upload(tenant.api, "late.txt")
    within("unscanned and served", lambda: status(tenant, late) == "unscanned" and served(late))
    assert tenant.api.put("/api/trash/settings", json={"retentionDays": 7}).status_code == 200

    def trashed(asset: dict[str, Any]) -> bool:  # (once edge's cached retention has the change)
        assert tenant.api.delete(f"/api/assets/{asset['id']}").status_code == 200
        return asset["id"] in {a["id"] for a in tenant.api.get("/api/trash").json()["assets"]}

    within("the trash's retention at edge", lambda: trashed(upload(tenant.api, "probe.txt")))
    assert trashed(late) and not served(late)

    scan_mode(admin, tenant, "block")
    synced = upload(tenant.api, "synced.txt")  # a live file the mode's sync holds: the sync has run
    within("the sync's hold", lambda: status(tenant, synced) == "unscanned" and not served(synced))
    restored = tenant.api.post(f"/api/trash/{late['id']}/restore")
    assert restored.status_code == 200, restored.text
    assert restored.json()["scanStatus"] == "unscanned"
    assert not served(late)
    assert_error(tenant.api.get(f"/api/assets/{late['id']}/url"), 409, "not_scanned")


def test_a_scan_that_ends_while_a_sync_holds_its_file_leaves_it_as_its_result_says(
    monkeypatch: pytest.MonkeyPatch, admin: Any, tenant: Any
) -> None:
    """A clean file's scan ends under ``async`` (blob releases it), its result still on the way
    to metadata, when the mode becomes ``block``: the sync reads ``pending`` and holds it. Once
    metadata has the result, the relay's settling releases it (held for ever before)."""
    scanner = Scanner(monkeypatch)
    delivered = threading.Event()
    report = MetadataClient.report_scan

    async def late_report(client: MetadataClient, org_id: str, asset_id: str, result: ScanReport) -> None:
        if result.status == "clean":  # (the probes' scans end unscanned)
            await until(delivered)
        await report(client, org_id, asset_id, result)

    monkeypatch.setattr(MetadataClient, "report_scan", late_report)
    scan_mode(admin, tenant, "async")
    fine = upload(tenant.api, CLEAN)
    assert scanner.cleaned.wait(10), "the scan never ran"
    scan_mode(admin, tenant, "block")
    within("held by the sync", lambda: not served(fine))
    assert status(tenant, fine) == "pending"

    delivered.set()
    within("clean", lambda: status(tenant, fine) == "clean")
    within("released once clean", lambda: served(fine))


def test_an_object_that_is_gone_stops_no_other_files_sync(
    monkeypatch: pytest.MonkeyPatch, admin: Any, tenant: Any
) -> None:
    """The store answers 404 for one file's hold (its object lost, or deleted meanwhile): the
    sync skips it and settles the others (the whole sync failed on it, again every lease)."""
    Scanner(monkeypatch)
    scan_mode(admin, tenant, "block")
    gone, later = upload(tenant.api, "a-gone.txt"), upload(tenant.api, "b-later.txt")
    within("unscanned", lambda: status(tenant, gone) == status(tenant, later) == "unscanned")
    set_held = BlobClient.set_held

    async def lost(client: BlobClient, key: str, held: bool, **kwargs: Any) -> None:
        if key == gone["key"]:
            raise CofferError(404, "not_found", "No such object.")
        await set_held(client, key, held, **kwargs)

    monkeypatch.setattr(BlobClient, "set_held", lost)
    scan_mode(admin, tenant, "async")
    within("the other file served", lambda: served(later))
