"""The dashboard's file browser in a real browser (DASHBOARD.md §10, scenarios 7-9): folders,
uploads with per-file progress, previews from the CDN origin, public and signed URLs, deletes,
the 100 MiB and quota refusals, usage, rename and move, and an upload without JavaScript."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from coffer_testkit.testing import png_bytes

pytestmark = pytest.mark.e2e

MIB = 1024 * 1024


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def row_of(page: Any, name: str) -> Any:
    return page.locator("#assets tbody tr", has_text=name)


def wait_uploads(page: Any, count: int) -> list[str]:
    """Wait until ``count`` upload rows have settled; answers their status texts."""
    page.wait_for_function(
        f"() => document.querySelectorAll('#uploads li.done, #uploads li.failed').length >= {count}",
        timeout=60_000,
    )
    return [str(t) for t in page.locator("#uploads .status").all_inner_texts()]


def usage(api: httpx.Client) -> dict[str, Any]:
    answer = api.get("/usage")
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def test_folder_upload_preview_urls_and_deletes(dashboard: Any, tmp_path: Path, until: Any) -> None:
    """Scenario 7, with scenario 9's usage check after the uploads."""
    ctx = dashboard.context()
    ctx.grant_permissions(["clipboard-read", "clipboard-write"])
    page = ctx.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
    dashboard.register(page, dashboard.person("files"))
    org_id = dashboard.create_org(page, "Pictures Inc")
    api = dashboard.api(dashboard.create_key(page, org_id, name="files-test"))

    page.goto(f"/dashboard/o/{org_id}")
    page.click("nav.side >> text=Files")
    page.fill("#folder-name", "Photos")
    page.click("form[action$='/files/folders'] button[type=submit]")
    page.wait_for_url(re.compile(r".*/files\?folder=fld_\w+$"))
    folder_id = page.url.rsplit("=", 1)[1]
    assert page.inner_text("nav.crumbs").split() == ["Files", "/", "Photos"]

    image, big = png_bytes(), os.urandom(20 * MIB)
    (tmp_path / "sunset.png").write_bytes(image)
    (tmp_path / "big.bin").write_bytes(big)
    uploads: list[str] = []
    page.on(
        "request",
        lambda r: (
            uploads.append(r.url) if r.method == "POST" and ("/upload" in r.url or "/tus" in r.url) else None
        ),
    )
    page.set_input_files("#file-input", [str(tmp_path / "sunset.png"), str(tmp_path / "big.bin")])
    statuses = wait_uploads(page, 2)
    assert all(s.startswith("Uploaded") for s in statuses), statuses
    assert page.eval_on_selector_all("#uploads progress", "bars => bars.map(b => b.value)") == [100, 100]
    # The small file in one request; the one above 8 MiB resumably (tus), into the same folder.
    assert len(uploads) == 2 and any(u.endswith(f"/files/upload?folder={folder_id}") for u in uploads), (
        uploads
    )
    assert any("/api/uploads/tus?token=cof_upl_" in u for u in uploads), uploads
    # The listing refreshes in place once the queue is empty.
    until(lambda: row_of(page, "big.bin").count() == 1 and row_of(page, "sunset.png").count() == 1)
    assert row_of(page, "big.bin").locator(".size").inner_text() == "20 MiB"
    assert row_of(page, "sunset.png").locator(".size").inner_text() == f"{len(image)} B"

    # Scenario 9: the bar reads what metadata counts.
    stored = usage(api)
    assert (stored["usedBytes"], stored["assetCount"]) == (len(image) + len(big), 2)
    page.reload()
    assert page.inner_text("#usage-bytes") == f"{stored['usedBytes']:,}"
    assert page.inner_text("#usage-count") == "2"

    # The asset page: the preview comes from the CDN origin, not the dashboard's.
    row_of(page, "sunset.png").locator("td.name a").click()
    page.wait_for_url(re.compile(r".*/files/ast_\w+$"))
    src = page.get_attribute("#preview-image", "src")
    assert src and src.startswith(dashboard.stack.public_cdn_url + "/") and "signature=" in src
    assert not src.startswith(dashboard.stack.edge_url)
    page.wait_for_function(
        "() => { const i = document.getElementById('preview-image');"
        " return i.complete && i.naturalWidth === 24; }"
    )
    assert page.inner_text("#asset-sha256") == sha(image)

    page.click("button[data-copy=public-url]")
    public_url = page.evaluate("navigator.clipboard.readText()")
    assert public_url.startswith(dashboard.stack.public_cdn_url + "/")
    fetched = httpx.get(public_url)
    assert fetched.status_code == 200 and sha(fetched.content) == sha(image)

    page.select_option("#expiry", "custom")
    page.fill("#custom-seconds", "60")
    page.click("#signed button[type=submit]")
    page.wait_for_selector("#signed-url")
    signed = page.input_value("#signed-url")
    assert "signature=" in signed and "in 1 min" in page.inner_text("#signed-expiry")
    assert httpx.get(signed).status_code == 200

    page.click("#delete-asset")
    page.click("main button.danger")
    page.wait_for_url(re.compile(r".*done=asset-deleted"))
    assert "The file was deleted." in page.inner_text("main")
    until(lambda: httpx.get(public_url).status_code == 404)
    assert row_of(page, "sunset.png").count() == 0

    page.click("#delete-folder")
    assert "Deletes this folder and 0 subfolders. The 1 file inside it moves to the root" in page.inner_text(
        "#delete-summary"
    )
    page.click("main button.danger")
    page.wait_for_url(re.compile(r".*/files\?done=folder-deleted$"))
    assert row_of(page, "big.bin").count() == 1  # now at the root
    assert api.get("/assets", params={"folderId": ""}).json()["total"] == 1

    # Changes to files reach the audit log through metadata's events, a moment after.
    def audit_log() -> str:
        page.goto(f"/dashboard/o/{org_id}/audit")
        return page.inner_text("main")

    until(lambda: "folder.deleted" in audit_log())
    log = audit_log()
    for action in (
        "folder.created",
        "asset.uploaded",
        "signed_url.created",
        "asset.deleted",
        "folder.deleted",
    ):
        assert action in log, action
    assert problems == []


def test_limits_refused_in_the_browser_and_by_quota(
    dashboard: Any, admin_for: Any, tmp_path: Path, until: Any
) -> None:
    """Scenario 8: over 100 MiB never leaves the browser; over quota shows the figures."""
    page, _, org_id = dashboard.signup_with_org(org="Tight")
    api = dashboard.api(dashboard.create_key(page, org_id, name="limits"))
    page.goto(f"/dashboard/o/{org_id}/files")
    huge = tmp_path / "huge.bin"
    with huge.open("wb") as f:
        f.truncate(100 * MIB + 1)  # sparse: no 100 MiB written to disk
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if r.method == "POST" else None)
    page.set_input_files("#file-input", str(huge))
    (status,) = wait_uploads(page, 1)
    assert status == "Refused before sending: 104,857,601 bytes is larger than 100 MiB (104,857,600 bytes)."
    assert sent == []

    first = b"a" * 500
    assert api.post("/assets", files={"file": ("first.txt", first)}).status_code == 201
    admin_for(dashboard.stack)("set-quota", "--org", org_id, "--quota-bytes", "1000")

    # The dashboard sees the new quota once its 5 s session cache lets it.
    def quota_shown() -> bool:
        page.goto(f"/dashboard/o/{org_id}/files")
        return "of 1000 B" in page.inner_text("#usage-text")

    until(quota_shown, timeout=15, interval=0.5)
    (tmp_path / "second.txt").write_bytes(b"b" * 800)
    page.set_input_files("#file-input", str(tmp_path / "second.txt"))
    statuses = wait_uploads(page, 1)
    assert statuses == ["Not enough space: uses 500 B of 1000 B, this file needs 800 B. See usage"], statuses
    assert page.get_attribute("#uploads li.failed a", "href") == f"/dashboard/o/{org_id}/usage"
    stored = usage(api)
    assert (stored["usedBytes"], stored["assetCount"]) == (500, 1)
    page.goto(f"/dashboard/o/{org_id}/files")
    assert (page.inner_text("#usage-bytes"), page.inner_text("#usage-count")) == ("500", "1")


def test_rename_and_move_folders_match_the_api(dashboard: Any) -> None:
    page, _, org_id = dashboard.signup_with_org(org="Tree")
    api = dashboard.api(dashboard.create_key(page, org_id, name="tree"))

    def create(name: str) -> str:
        page.fill("#folder-name", name)
        page.click("form[action$='/files/folders'] button[type=submit]")
        page.wait_for_url(re.compile(r".*/files\?folder=fld_\w+$"))
        return str(page.url.rsplit("=", 1)[1])

    page.goto(f"/dashboard/o/{org_id}/files")
    a = create("A")
    a1 = create("A1")
    page.goto(f"/dashboard/o/{org_id}/files")
    b = create("B")
    # A duplicate sibling name is refused with the page's message, and nothing is made.
    page.goto(f"/dashboard/o/{org_id}/files")
    page.fill("#folder-name", "B")
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.click("form[action$='/files/folders'] button[type=submit]")
    assert answer.value.status == 409
    assert "A folder named 'B' already exists here." in page.inner_text(".alert.error")

    page.goto(f"/dashboard/o/{org_id}/files?folder={a1}")
    page.fill("#rename-folder", "A-one")
    page.click("form[action$='/rename'] button[type=submit]")
    page.wait_for_url(re.compile(rf".*folder={a1}$"))
    assert page.inner_text("nav.crumbs").split() == ["Files", "/", "A", "/", "A-one"]

    page.goto(f"/dashboard/o/{org_id}/files?folder={a}")
    page.click("#move-folder")
    page.select_option("#destination", b)
    page.click("main button[type=submit]")
    page.wait_for_url(re.compile(rf".*folder={a}$"))
    assert page.inner_text("nav.crumbs").split() == ["Files", "/", "B", "/", "A"]

    # B into A-one, its own grandchild now: refused, and the tree is unchanged.
    page.goto(f"/dashboard/o/{org_id}/files?folder={b}")
    page.click("#move-folder")
    page.select_option("#destination", a1)
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.click("main button[type=submit]")
    assert answer.value.status == 409
    assert "A folder cannot move into itself or one of its subfolders." in page.inner_text(".alert.error")

    # A text preview: the first 64 KiB fetched from the CDN and shown as text, never as HTML.
    text = "<b>not bold</b>\n" + "line\n" * 20_000
    made = api.post("/assets", files={"file": ("page.txt", text.encode(), "text/plain")}).json()
    page.goto(f"/dashboard/o/{org_id}/files/{made['id']}")
    page.wait_for_function("() => document.getElementById('preview-text')?.textContent.startsWith('<b>')")
    shown = page.text_content("#preview-text")
    assert shown == text[: 64 * 1024] and page.locator("#preview-text b").count() == 0
    assert page.is_visible("#preview-text-note")

    path = api.get(f"/folders/{a1}").json()["path"]
    assert path == [{"id": b, "name": "B"}, {"id": a, "name": "A"}, {"id": a1, "name": "A-one"}]
    assert api.get(f"/folders/{b}").json()["parentId"] is None


def test_upload_and_asset_changes_without_javascript(dashboard: Any, tmp_path: Path) -> None:
    page, _, org_id = dashboard.signup_with_org(org="Plain", java_script_enabled=False)
    api = dashboard.api(dashboard.create_key(page, org_id, name="plain"))
    folder = api.post("/folders", json={"name": "Docs"}).json()
    data = b"plain form upload\n" * 100
    (tmp_path / "notes.txt").write_bytes(data)
    page.goto(f"/dashboard/o/{org_id}/files?folder={folder['id']}")
    page.set_input_files("#file-input", str(tmp_path / "notes.txt"))
    with page.expect_navigation():
        page.click("#upload-form button[type=submit]")
    assert "The file was uploaded." in page.inner_text("main")
    (asset,) = api.get("/assets", params={"folderId": folder["id"]}).json()["assets"]
    assert (asset["name"], asset["size"], asset["sha256"]) == ("notes.txt", len(data), sha(data))

    row_of(page, "notes.txt").locator("td.name a").click()
    page.fill("#rename-asset", "renamed.txt")
    page.click("form[action$='/rename'] button[type=submit]")
    assert "The file was renamed." in page.inner_text("main")
    page.click("#move-asset")
    page.select_option("#destination", "")
    page.click("main button[type=submit]")
    assert "The file was moved." in page.inner_text("main")
    moved = api.get(f"/assets/{asset['id']}").json()
    assert (moved["name"], moved["folderId"], moved["key"]) == ("renamed.txt", None, asset["key"])
