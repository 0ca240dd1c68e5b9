"""The Files page's Trash view (issue 47) in a real browser: an owner turns the trash on,
deletes a file (its URL answers 404), sees it listed with who deleted it and when it goes,
restores it (the same URL answers 200 again) and deletes another for good. The page is saved
as a screenshot (``$COFFER_SCREENSHOTS_DIR``, else /tmp/shots)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e


def test_the_trash_view(dashboard: Any, until: Any) -> None:
    page, _, org_id = dashboard.signup_with_org(org="Trash Co", viewport={"width": 1280, "height": 800})
    api = dashboard.api(dashboard.create_key(page, org_id, name="trash-test"))
    page.goto(f"/dashboard/o/{org_id}/files/trash")
    assert page.locator("#trash-off").is_visible()
    page.fill("#retention-days", "14")
    page.click("#trash-retention-form button[type=submit]")
    assert "The trash retention is saved" in page.inner_text("main")
    assert page.inner_text("#trash-retention") == "14 days"

    kept = api.post("/assets", files={"file": ("report.pdf", b"%PDF-1.4 report", "application/pdf")}).json()
    gone = api.post("/assets", files={"file": ("draft.txt", b"old draft", "text/plain")}).json()
    # The key's principal may be cached from before the retention (at most 5 s): poll the trash.
    for asset in (kept, gone):
        page.goto(f"/dashboard/o/{org_id}/files/{asset['id']}/delete")
        assert "moves to the Trash for 14 days" in page.inner_text("main")
        page.click("main form button[type=submit]")
        until(lambda a=asset: httpx.get(a["publicUrl"]).status_code == 404, timeout=5)
    page.goto(f"/dashboard/o/{org_id}/files")
    page.click("#trash-link")
    # The click navigates: counted on the Files page still loaded, the rows were 0 (a run of 06a497e).
    page.wait_for_url("**/files/trash")
    rows = page.locator("#trash tbody tr")
    assert rows.count() == 2
    row = page.locator(f"#trashed-{kept['id']}")
    assert "report.pdf" in row.inner_text()
    assert row.locator("td.by").inner_text() != ""
    # The actions are a cell of the row like the others: same top and height, so one border.
    name_cell, actions = row.locator("td.name").bounding_box(), row.locator("td.actions").bounding_box()
    assert name_cell is not None and actions is not None
    assert (actions["y"], actions["height"]) == (name_cell["y"], name_cell["height"]), (name_cell, actions)
    assert page.inner_text("#trash-count") == "2"
    out = Path(os.environ.get("COFFER_SCREENSHOTS_DIR") or "/tmp/shots")
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / "trash.png"), full_page=True)

    row.locator("button.restore").click()
    assert "The file is back, with the same URLs." in page.inner_text("main")
    assert httpx.get(kept["publicUrl"]).status_code == 200
    page.locator(f"#trashed-{gone['id']} button.purge").click()
    assert "deleted for good" in page.inner_text("main")
    expect(page.locator("#trash-empty")).to_be_visible()
    assert api.get(f"/assets/{kept['id']}").status_code == 200
    usage = api.get("/usage").json()
    assert (usage["trashedBytes"], usage["trashedCount"], usage["assetCount"]) == (0, 0, 1)
