"""The file browser's resumable uploads (tus, CONTRACT §9) in a real browser: files above 8 MiB
go through tus-js-client; the connection cut mid-way and restored, the upload finishes by
itself; the page reloaded mid-way and the same file chosen again, it resumes where the service
stopped (its URL kept in that tab only, and gone, the upload ended, once the session signs
out). The link is slowed (Chrome's network emulation) so there is a "mid-way" to act in."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.e2e

MIB = 1024 * 1024
# About 5 s for 20 MiB.
UPLOAD_BYTES_PER_SECOND = 4 * MIB


def slow_link(page: Any, *, offline: bool = False) -> Any:
    """Chrome's own network emulation on this page: uploads slowed, or no network at all."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send(
        "Network.emulateNetworkConditions",
        {
            "offline": offline,
            "latency": 0,
            "downloadThroughput": -1,
            "uploadThroughput": UPLOAD_BYTES_PER_SECOND,
        },
    )
    return cdp


def set_offline(cdp: Any, offline: bool) -> None:
    cdp.send(
        "Network.emulateNetworkConditions",
        {
            "offline": offline,
            "latency": 0,
            "downloadThroughput": -1,
            "uploadThroughput": UPLOAD_BYTES_PER_SECOND,
        },
    )


def progress(page: Any) -> int:
    return int(page.eval_on_selector("#uploads li:last-child progress", "b => b.value"))


def status(page: Any) -> str:
    return str(page.inner_text("#uploads li:last-child .status"))


def uploaded_asset(page: Any) -> str:
    page.wait_for_function(
        "() => { const li = document.querySelector('#uploads li:last-child');"
        " return li && (li.classList.contains('done') || li.classList.contains('failed')); }",
        timeout=120_000,
    )
    assert status(page).startswith("Uploaded"), status(page)
    href = page.get_attribute("#uploads li:last-child .status a", "href")
    assert href
    match = re.search(r"ast_\w+", href)
    assert match, href
    return match.group(0)


def test_a_dropped_connection_resumes_by_itself(dashboard: Any, tmp_path: Path, until: Any) -> None:
    page = dashboard.context().new_page()
    dashboard.register(page, dashboard.person("train"))
    org_id = dashboard.create_org(page, "Trains Ltd")
    api = dashboard.api(dashboard.create_key(page, org_id, name="train-test"))
    data = os.urandom(20 * MIB + 7)
    (tmp_path / "journey.mp4").write_bytes(data)
    page.goto(f"/dashboard/o/{org_id}/files")
    cdp = slow_link(page)
    page.set_input_files("#file-input", str(tmp_path / "journey.mp4"))
    until(lambda: progress(page) >= 30, timeout=60)
    set_offline(cdp, True)  # the train enters a tunnel
    until(lambda: "retrying" in status(page), timeout=30)
    shots = Path(os.environ.get("COFFER_SCREENSHOTS_DIR") or tmp_path)
    page.screenshot(path=str(shots / "files-upload-retrying.png"), full_page=True)
    set_offline(cdp, False)
    asset_id = uploaded_asset(page)
    asset = api.get(f"/assets/{asset_id}").json()
    assert asset["size"] == len(data) and asset["sha256"] == hashlib.sha256(data).hexdigest()
    assert asset["name"] == "journey.mp4"


def test_a_reloaded_page_resumes_the_same_file(dashboard: Any, tmp_path: Path, until: Any) -> None:
    page = dashboard.context().new_page()
    dashboard.register(page, dashboard.person("reload"))
    org_id = dashboard.create_org(page, "Reloaders")
    api = dashboard.api(dashboard.create_key(page, org_id, name="reload-test"))
    data = os.urandom(20 * MIB + 11)
    path = tmp_path / "film.mov"
    path.write_bytes(data)
    offsets: list[int] = []
    page.on(
        "request",
        lambda r: offsets.append(int(r.headers["upload-offset"])) if r.method == "PATCH" else None,
    )
    page.goto(f"/dashboard/o/{org_id}/files")
    slow_link(page)
    page.set_input_files("#file-input", str(path))
    until(lambda: progress(page) >= 50, timeout=60)  # past the first 8 MiB request
    page.reload()
    slow_link(page)
    offsets.clear()
    page.set_input_files("#file-input", str(path))
    until(lambda: "Resuming" in status(page) or progress(page) > 0, timeout=30)
    shots = Path(os.environ.get("COFFER_SCREENSHOTS_DIR") or tmp_path)
    until(lambda: progress(page) >= 60, timeout=60)
    page.screenshot(path=str(shots / "files-upload-resumed.png"), full_page=True)
    asset_id = uploaded_asset(page)
    page.screenshot(path=str(shots / "files-upload-resumed-done.png"), full_page=True)
    # After the reload it went on from where the service was, not from the start.
    assert offsets and offsets[0] >= 8 * MIB, offsets
    asset = api.get(f"/assets/{asset_id}").json()
    assert asset["size"] == len(data) and asset["sha256"] == hashlib.sha256(data).hexdigest()
    assert page.locator("#uploads li.resumed").count() == 1


STORED = """() => {
  const tus = (store) => Object.keys(store).filter((k) => k.startsWith("tus::"))
    .map((k) => JSON.parse(store.getItem(k)).uploadUrl).sort();  // Storage keys have no order
  return { local: tus(localStorage), session: tus(sessionStorage) };
}"""


def test_an_unfinished_uploads_url_stays_in_its_tab_and_goes_with_the_session(
    dashboard: Any, tmp_path: Path, until: Any
) -> None:
    """The URL of an unfinished upload, which carries the upload's capability, is kept in the
    tab's sessionStorage (a reload resumes it), never in localStorage, where it outlived the
    session; signing out clears the browser's storage, and the uploads, bound to the session
    their tokens were minted in, end with it."""
    page = dashboard.context().new_page()
    dashboard.register(page, dashboard.person("leaver"))
    org_id = dashboard.create_org(page, "Leavers")
    paths = [tmp_path / "archive.tar", tmp_path / "backup.tar"]
    for path in paths:
        path.write_bytes(os.urandom(20 * MIB + 3))
    page.goto(f"/dashboard/o/{org_id}/files")
    slow_link(page)
    page.set_input_files("#file-input", [str(p) for p in paths])
    until(lambda: len(page.evaluate(STORED)["session"]) == 2, timeout=60)
    stored = page.evaluate(STORED)
    assert stored["local"] == [], stored
    page.reload()
    assert page.evaluate(STORED) == stored  # the tab keeps them: choosing a file again resumes it
    with page.expect_navigation():
        page.click("form[action='/dashboard/logout'] button[type=submit]")
    assert page.url.endswith("/dashboard/login"), page.url
    assert page.evaluate(STORED) == {"local": [], "session": []}
    for url in stored["session"]:
        until(lambda u=url: httpx.head(u, headers={"Tus-Resumable": "1.0.0"}).status_code == 404, timeout=15)


def test_the_usage_page_shows_an_unfinished_upload_and_ends_it(dashboard: Any, until: Any) -> None:
    """Issue 44: an upload that stopped half-way is listed on the Usage page with what it holds
    against the quota; "End upload" deletes it and frees the space."""
    page, _, org_id = dashboard.signup_with_org("squat", "Squatted")
    key = dashboard.create_key(page, org_id, name="uploader")
    with dashboard.api(key) as api:
        created = api.post(
            "/uploads/tus",
            headers={
                "Tus-Resumable": "1.0.0",
                "Upload-Length": str(3 * MIB),
                "Upload-Metadata": "filename aGFsZi5iaW4=",
            },
        )
        assert created.status_code == 201, created.text
        upload_id = created.headers["location"].rsplit("/", 1)[1]
        sent = api.patch(
            f"/uploads/tus/{upload_id}",
            content=os.urandom(MIB),
            headers={
                "Tus-Resumable": "1.0.0",
                "Upload-Offset": "0",
                "Content-Type": "application/offset+octet-stream",
            },
        )
        assert sent.status_code == 204, sent.text
        row = f"#upload-{upload_id}"

        def shows_its_offset() -> bool:
            # The chunk's 204 comes once its bytes are durable; metadata's record of the new
            # offset follows it (a HEAD waits for it; a page read meanwhile may show 0 B).
            page.goto(f"/dashboard/o/{org_id}/usage")
            return "1 MiB of 3 MiB" in page.inner_text(row)

        until(shows_its_offset, timeout=10)
        assert "half.bin" in page.inner_text(row)
        assert page.inner_text("#held-bytes") == "3 MiB"
        page.click(f"{row} button[type=submit]")
        page.wait_for_url(f"**/dashboard/o/{org_id}/usage?ended=1")
        assert "The upload was ended" in page.inner_text("main")
        assert page.query_selector(row) is None
        assert "No unfinished uploads." in page.inner_text("#open-uploads")
        assert api.get("/uploads").json()["total"] == 0
        assert api.head(f"/uploads/tus/{upload_id}", headers={"Tus-Resumable": "1.0.0"}).status_code == 404
