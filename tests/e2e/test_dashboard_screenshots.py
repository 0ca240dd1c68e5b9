"""One full-page screenshot of every dashboard page (DASHBOARD.md §10, scenario 17), taken on a
walk that also checks each page answers as it should, and the operator's password reset link.

PNGs go to ``$COFFER_SCREENSHOTS_DIR`` (docs/dashboard when refreshing the docs; a CI artifact
directory in CI), else to the test's temporary directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from coffer_testkit.testing import png_bytes

pytestmark = pytest.mark.e2e


def test_every_page(dashboard: Any, admin_for: Any, tmp_path: Path, until: Any) -> None:
    out = Path(os.environ.get("COFFER_SCREENSHOTS_DIR") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    taken: list[str] = []

    def shot(page: Any, name: str) -> None:
        page.wait_for_load_state()
        page.screenshot(path=str(out / f"{name}.png"), full_page=True)
        taken.append(name)

    viewport = {"width": 1280, "height": 800}
    page = dashboard.page(viewport=viewport)
    page.goto("/dashboard/login")
    shot(page, "login")
    page.goto("/dashboard/register")
    shot(page, "register")
    page.goto("/dashboard/forgot")
    shot(page, "forgot")

    owner = dashboard.person("ada")
    dashboard.register(page, owner)
    shot(page, "org-new")
    org_id = dashboard.create_org(page, "Acme Studio")
    second = dashboard.create_org(page, "Acme Labs")
    # Some bytes, so that usage shows a bar.
    key = dashboard.create_key(page, org_id, name="ci", expiry="30d")
    with httpx.Client(base_url=dashboard.stack.edge_url + "/api", headers={"x-api-key": key}) as api:
        for n in range(3):
            answer = api.post("/assets", files={"file": (f"photo-{n}.jpg", os.urandom(300_000 * (n + 1)))})
            assert answer.status_code == 201, answer.text
        # A key that may only upload into /avatars, for the Keys page's "Can" column.
        avatars = api.post("/folders", json={"name": "avatars"}).json()["id"]
        scoped = api.post("/keys", json={"name": "site", "scopes": ["uploader"], "folderId": avatars})
        assert scoped.status_code == 201, scoped.text
    dashboard.create_key(page, org_id, kind="user", name="laptop", expiry="7d")
    shot(page, "key-created")
    page.goto("/dashboard/orgs")
    shot(page, "orgs")
    page.goto(f"/dashboard/o/{org_id}")
    shot(page, "overview")
    page.goto(f"/dashboard/o/{org_id}/keys")
    shot(page, "keys")
    page.locator("tr", has_text="laptop").locator("text=Rotate").click()
    shot(page, "key-rotate")
    page.goto(f"/dashboard/o/{org_id}/keys")
    page.locator("tr", has_text="laptop").locator("text=Delete").click()
    shot(page, "key-delete")

    page.goto(f"/dashboard/o/{org_id}/members")
    page.fill("#invite-email", "grace@example.com")
    page.click("form[action$='/invitations'] button[type=submit]")
    link = page.input_value("#invite-link")
    shot(page, "invite-created")
    page.goto(f"/dashboard/o/{org_id}/members")
    page.fill("#invite-email", "linus@example.com")
    page.select_option("#invite-role", "owner")
    page.click("form[action$='/invitations'] button[type=submit]")
    page.goto(f"/dashboard/o/{org_id}/members")
    shot(page, "members")

    guest = dashboard.page(viewport=viewport)
    guest.goto(link)
    shot(guest, "invite")
    guest.click("text=Create account")
    grace = dashboard.person("grace")
    guest.fill("#password", grace.password)
    guest.click("main button[type=submit]")
    guest.wait_for_url("**/dashboard/invite/*")
    guest.click("text=Accept and join")
    guest.wait_for_url(f"**/dashboard/o/{org_id}")

    # An unfinished resumable upload, a quarter sent, for the Usage page's list.
    with httpx.Client(base_url=dashboard.stack.edge_url + "/api", headers={"x-api-key": key}) as api:
        tus = {"Tus-Resumable": "1.0.0"}
        created = api.post(
            "/uploads/tus",
            headers={
                **tus,
                "Upload-Length": str(4 * 1024 * 1024),
                "Upload-Metadata": "filename dmlkZW8ubXA0",
            },
        )
        assert created.status_code == 201, created.text
        chunk = {**tus, "Upload-Offset": "0", "Content-Type": "application/offset+octet-stream"}
        sent = api.patch(created.headers["location"], content=os.urandom(1024 * 1024), headers=chunk)
        assert sent.status_code == 204, sent.text

    def usage_shows_the_upload() -> bool:
        page.goto(f"/dashboard/o/{org_id}/usage")
        return "1 MiB of 4 MiB" in page.inner_text("#open-uploads")

    until(usage_shows_the_upload)
    assert "3 assets, 1,800,000 bytes." in page.inner_text("main")  # metadata's own count
    shot(page, "usage")

    # The file browser: folders, two uploads from the browser (their progress rows stay), then
    # the image's page with its preview from the CDN and a signed URL.
    with httpx.Client(base_url=dashboard.stack.edge_url + "/api", headers={"x-api-key": key}) as api:
        for name in ("Invoices", "Photos"):
            assert api.post("/folders", json={"name": name}).status_code == 201
    (tmp_path / "harbour-at-dusk.png").write_bytes(png_bytes(480, 300))
    (tmp_path / "notes.txt").write_text("Shot list\n- harbour\n- lighthouse\n")
    page.goto(f"/dashboard/o/{org_id}/files")
    page.set_input_files("#file-input", [str(tmp_path / "harbour-at-dusk.png"), str(tmp_path / "notes.txt")])
    page.wait_for_function("() => document.querySelectorAll('#uploads li.done').length === 2")
    until(lambda: page.locator("#assets tr", has_text="harbour-at-dusk.png").count() == 1)
    shot(page, "files")
    page.click("#view-grid")
    page.wait_for_selector("#asset-grid")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#asset-grid img')].every(i => i.complete)",
        timeout=60_000,  # the first thumbnails wait for blob's worker processes to start
    )
    shot(page, "files-grid")
    page.click("#view-table")
    page.wait_for_selector("#assets")
    page.locator("#assets tr", has_text="harbour-at-dusk.png").locator("td.name a").click()
    page.wait_for_function("() => document.getElementById('preview-image')?.naturalWidth === 480")
    page.select_option("#expiry", "86400")
    page.click("#signed button[type=submit]")
    page.wait_for_selector("#signed-url")
    shot(page, "asset")
    page.goto(f"/dashboard/o/{org_id}/audit")
    shot(page, "audit")
    page.goto(f"/dashboard/o/{org_id}/settings")
    shot(page, "settings")
    page.goto("/dashboard/account")
    shot(page, "account")
    answer = page.goto(f"/dashboard/o/{second.replace('org_', 'org_0')}")
    assert answer.status == 404
    shot(page, "not-found")

    # The operator's one-time reset link: a new password, every session ended.
    reset = admin_for(dashboard.stack)("reset-password", "--email", owner.email)
    token = reset["url"].rsplit("/", 1)[-1]
    stranger = dashboard.page(viewport=viewport)
    answer = stranger.goto(f"/dashboard/reset/{token}")
    assert answer.status == 200 and answer.headers["referrer-policy"] == "no-referrer"
    shot(stranger, "reset")
    stranger.fill("#password", owner.password + "-new")
    stranger.click("main button[type=submit]")
    stranger.wait_for_url("**/dashboard/login?reset=1")
    assert stranger.goto(f"/dashboard/reset/{token}").status == 410
    # The reset ended the owner's other sessions (within the 5 s the session cache allows).
    assert until(lambda: "/dashboard/login" in page.goto(f"/dashboard/o/{org_id}").url, timeout=5.5)
    dashboard.login(stranger, type(owner)(owner.email, owner.password + "-new"))
    assert "/dashboard/o/" in stranger.url or "/dashboard/orgs" in stranger.url

    assert len(taken) == len(set(taken)) >= 20
