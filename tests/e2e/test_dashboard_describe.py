"""An asset's metadata and tags on the dashboard (issue 50) in a real browser: an owner adds tags
and metadata on the asset page (a bad tag shows metadata's message and changes nothing),
follows a tag to the files page filtered by it (the matching files of every folder, each with
its folder), removes a tag, and sees the grid's BlurHash placeholder under the thumbnail, all
under the dashboard's CSP with no console error and no axe-core violation. Screenshots go to
``$COFFER_SCREENSHOTS_DIR`` (else /tmp/shots): the asset page as asset-metadata.png, the
filtered listing as files-tagged.png and files-tagged-grid.png, and a tile with its
placeholder alone as files-placeholder.png."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from coffer_testkit.testing import png_bytes

pytestmark = pytest.mark.e2e


def violations(page: Any) -> list[str]:
    """axe-core's findings on the page (as test_dashboard_accessibility.py runs it on every page;
    there the file has no tags or metadata)."""
    from axe_playwright_python.sync_playwright import Axe

    return [f"{v['impact']} {v['id']}" for v in Axe().run(page).response["violations"]]


def test_tags_and_metadata_on_the_asset_page_and_the_tag_filter(dashboard: Any, until: Any) -> None:
    page, _, org_id = dashboard.signup_with_org(org="Tags Co", viewport={"width": 1280, "height": 900})
    problems: list[tuple[str, str]] = []
    page.on(
        "console",
        lambda m: (
            problems.append((m.text, m.location.get("url", ""))) if m.type in ("error", "warning") else None
        ),
    )
    api = dashboard.api(dashboard.create_key(page, org_id, name="describe-test"))
    trips = api.post("/folders", json={"name": "Trips"}).json()
    alps = api.post("/folders", json={"name": "Alps", "parentId": trips["id"]}).json()
    photo = api.post(
        "/assets",
        data={"folderId": alps["id"]},
        files={"file": ("sunset.png", png_bytes(320, 200), "image/png")},
    ).json()
    notes = api.post("/assets", files={"file": ("notes.txt", b"plain notes", "text/plain")}).json()
    assert "id" in photo and "id" in notes, (photo, notes)
    files = f"/dashboard/o/{org_id}/files"

    page.goto(f"{files}/{photo['id']}")
    assert page.locator("#no-tags").is_visible() and page.locator("#no-metadata").is_visible()
    page.fill("#add-tags", "summer, cover")
    page.click("#add-tags-form button[type=submit]")
    assert "The tags are added." in page.inner_text("main")
    expect(page.locator("#asset-tags a.tag-link")).to_have_text(["cover", "summer"])

    page.fill("#meta-key", "camera")
    page.fill("#meta-value", "X100V")
    page.click("#set-metadata")
    assert "The metadata is saved." in page.inner_text("main")
    page.fill("#meta-key", "iso")
    page.fill("#meta-value", "400")
    page.select_option("#meta-type", "number")
    page.click("#set-metadata")
    rows = page.locator("#asset-metadata tbody tr")
    expect(rows).to_have_count(2)  # (the answer is a new page: count() would not wait for it)
    assert rows.nth(0).inner_text().split("\t")[:2] == ["camera", "X100V"]
    assert rows.nth(1).inner_text().startswith("iso\t400 (number)")

    # A tag out of bounds: metadata's message on the page, a 400, the tags as they were.
    with page.expect_response(lambda r: r.url.endswith(f"/files/{photo['id']}/tags")) as sent:
        page.fill("#add-tags", "two words")
        page.click("#add-tags-form button[type=submit]")
    assert sent.value.status == 400
    assert "A tag is 1-64 characters" in page.inner_text("#description .alert.error")
    assert page.input_value("#add-tags") == "two words"
    assert api.get(f"/assets/{photo['id']}").json()["tags"] == ["cover", "summer"]
    assert api.get(f"/assets/{photo['id']}").json()["metadata"] == {"camera": "X100V", "iso": 400}

    # The public API sees what the page wrote; the page writes through the same PATCH rules.
    page.goto(f"{files}/{photo['id']}")
    out = Path(os.environ.get("COFFER_SCREENSHOTS_DIR") or "/tmp/shots")
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / "asset-metadata.png"), full_page=True)
    assert violations(page) == []

    # A tag is a link to the files page filtered by it: every folder, each file's folder shown.
    page.click("#asset-tags a.tag-link >> text=summer")
    page.wait_for_url(re.compile(r".*/files\?tag=summer$"))
    assert page.inner_text("h1") == "Tagged: summer"
    listed = page.locator("#assets tbody tr")
    assert listed.count() == 1
    assert "sunset.png" in listed.nth(0).inner_text()
    assert page.inner_text(f"#asset-{photo['id']} td.folder-path") == "/Trips/Alps"
    assert page.locator(f"#asset-{photo['id']} .tags a").all_inner_texts() == ["cover", "summer"]
    assert page.locator("#upload-form").count() == 0
    page.screenshot(path=str(out / "files-tagged.png"), full_page=True)
    assert violations(page) == []
    # The filter form: a tag no file has.
    page.fill("#tag-filter", "winter")
    page.click("#tag-filter-form button[type=submit]")
    assert "No file has the tag “winter”." in page.inner_text("#listing")
    # Several tags: the files with every one.
    page.fill("#tag-filter", "cover summer")
    page.click("#tag-filter-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/files\?tag=cover\+summer$"))
    assert page.inner_text("h1") == "Tagged: cover, summer"
    assert page.locator("#assets tbody tr").count() == 1
    page.screenshot(path=str(out / "files-tagged-several.png"), full_page=True)
    page.fill("#tag-filter", "summer, winter")
    page.click("#tag-filter-form button[type=submit]")
    assert "No file has the tags “summer, winter”." in page.inner_text("#listing")
    page.click("#clear-tag")
    page.wait_for_url(re.compile(r".*/files$"))

    # Removing a tag on the asset page; then the filter no longer lists it.
    page.goto(f"{files}/{photo['id']}")
    page.click("#asset-tags button[aria-label='Remove the tag cover']")
    assert "The tag is removed." in page.inner_text("main")
    expect(page.locator("#asset-tags a.tag-link")).to_have_text(["summer"])
    page.goto(f"{files}?tag=cover")
    assert "No file has the tag “cover”." in page.inner_text("#listing")

    # The grid: once blob computed the image's BlurHash (after the upload; a fork server's first
    # image takes a few seconds), it is the thumbnail's placeholder, a data: image the CSP allows.
    until(lambda: api.get(f"/assets/{photo['id']}").json()["placeholder"], timeout=60)
    page.goto(f"{files}?tag=summer")
    page.click("#view-grid")
    tile = page.locator(f"#tile-{photo['id']}")
    placeholder = tile.locator("img.placeholder")
    assert placeholder.get_attribute("src").startswith("data:image/png;base64,")
    page.wait_for_function(
        "id => document.querySelector(`#tile-${id} img.thumb`).complete", arg=photo["id"], timeout=15_000
    )
    assert placeholder.evaluate("img => img.naturalWidth") == 8  # decoded: the CSP let it in
    assert tile.locator("img.thumb").evaluate("img => img.naturalWidth") > 0
    placeholder.wait_for(state="hidden")  # the loaded thumbnail took its place
    assert tile.locator(".folder-path").inner_text() == "/Trips/Alps"
    page.screenshot(path=str(out / "files-tagged-grid.png"), full_page=True)
    assert violations(page) == []
    # What the tile shows before its thumbnail arrives (the thumbnail hidden here by hand).
    placeholder.evaluate("img => { img.hidden = false; img.nextElementSibling.style.visibility = 'hidden'; }")
    tile.screenshot(path=str(out / "files-placeholder.png"))
    # Chromium reports the refused post's 400 on the console (a moment later): that one only.
    refused = f"/files/{photo['id']}/tags"
    assert [(text, url) for text, url in problems if not url.endswith(refused)] == [], problems
