"""The file browser's rules, in process (the four real apps, both databases): the upload route's
two CSRF forms and its answers, folder name/duplicate/cycle refusals, the delete summary,
signed-URL expiry bounds, another organization's asset, and the audit events it records; the
asset page's metadata and tag forms, the tag filter and the grid's BlurHash placeholders.
What needs a browser (progress bars, previews from the CDN origin, the 100 MiB pre-check) is
in tests/e2e/test_dashboard_files.py."""

from __future__ import annotations

import base64
import csv
import io
import json
import re
import secrets
import struct
import time
import zlib
from collections.abc import Iterator
from typing import Any

import blurhash
import httpx
import pytest
from sqlalchemy import create_engine, text

from coffer_edge.clients.auth import AccountsClient
from coffer_edge.dashboard import placeholders
from coffer_edge.dashboard.routes.files import _expires_in, _first_part_token, form_value, preview_kind
from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.ids import new_id
from coffer_kit.metrics import HTTP_REQUESTS
from coffer_testkit.dashboard import COOKIE, SAME_ORIGIN, Browser, audit_once, sign_up
from coffer_testkit.testing import TLS

DEVICE_COOKIE = "__Host-coffer_device"


@pytest.fixture
def browser(stack: Any) -> Iterator[Browser]:
    b = sign_up(stack.edge_url)
    yield b
    b.http.close()


def folder_of(answer: httpx.Response) -> str:
    assert answer.status_code == 303, answer.text
    return answer.headers["location"].rsplit("=", 1)[1]


def test_first_part_token() -> None:
    delimiter = b"--XYZ"
    head = b'--XYZ\r\nContent-Disposition: form-data; name="csrf_token"\r\n\r\nabc\r\n--XYZ\r\n'
    assert _first_part_token(head, delimiter) == "abc"
    assert _first_part_token(head[:30], delimiter) is None  # not all there yet
    other = b'--XYZ\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\nabc'
    assert _first_part_token(other, delimiter) == ""
    assert _first_part_token(b"garbage that is long", delimiter) == ""


def test_preview_kinds_and_expiry_bounds() -> None:
    assert [preview_kind(t) for t in ("image/png", "video/mp4", "audio/ogg", "text/csv")] == [
        "image",
        "video",
        "audio",
        "text",
    ]
    assert preview_kind("application/json") == preview_kind("application/ld+json") == "text"
    assert preview_kind("application/zip") == "none"
    assert _expires_in("3600", "") == 3600
    assert _expires_in("custom", " 60 ") == 60
    assert _expires_in("custom", "604800") == 604_800
    for choice, custom in (
        ("custom", "0"),
        ("custom", "604801"),
        ("custom", "1.5"),
        ("custom", ""),
        ("99", ""),
    ):
        with pytest.raises(CofferError):
            _expires_in(choice, custom)


def test_uploads_need_the_csrf_token_in_the_header_or_first(browser: Browser, admin: Any) -> None:
    made = browser.upload_xhr(b"x" * 1000, "scripted.bin")
    assert made.status_code == 201, made.text
    body = made.json()
    assert body["asset"]["name"] == "scripted.bin" and body["size"] == "1000 B"
    assert body["page"] == f"{browser.files}/{body['asset']['id']}"

    plain = browser.upload_form([("csrf_token", browser.csrf), ("file", b"y" * 10)])
    assert plain.status_code == 303 and plain.headers["location"].endswith("/files?done=uploaded")
    assert browser.counts() == (1010, 2)

    refused = [
        browser.upload_form([("csrf_token", "wrong"), ("file", b"z" * 10)]),
        browser.upload_form([("file", b"z" * 10), ("csrf_token", browser.csrf)]),  # not first
        browser.upload_form([("file", b"z" * 10)]),
        browser.http.post(
            f"{browser.files}/upload", files={"file": ("n", b"z")}, headers={"x-csrf-token": "no"}
        ),
    ]
    assert [r.status_code for r in refused] == [403, 403, 403, 403]
    assert "This request did not come from the dashboard." in refused[0].text
    assert browser.counts() == (1010, 2)

    admin("set-quota", "--org", browser.org_id, "--quota-bytes", "2048")
    # The session answer (with the quota) is cached for 1 s in these tests.
    deadline = time.monotonic() + 5
    while "of 2 KiB" not in browser.http.get(browser.files).text:
        assert time.monotonic() < deadline, "the new quota never showed"
        time.sleep(0.1)
    over = browser.upload_xhr(b"q" * 1500, "over.bin")
    assert over.status_code == 413, over.text
    error = over.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["message"] == "Not enough space: uses 1010 B of 2 KiB, this file needs 1.5 KiB."
    assert error["details"] == {"usedBytes": 1010, "quotaBytes": 2048, "requestedBytes": 1500}
    page = browser.upload_form([("csrf_token", browser.csrf), ("file", b"q" * 1500)])
    assert page.status_code == 413 and "Not enough space: uses 1010 B of 2 KiB" in page.text
    assert f'href="/dashboard/o/{browser.org_id}/usage"' in page.text
    assert browser.counts() == (1010, 2)

    gone = browser.upload_xhr(b"a", folder="fld_doesnotexist")
    assert gone.status_code == 404 and gone.json()["error"]["message"] == "The folder no longer exists."


def test_a_resumable_upload_gets_an_endpoint_for_that_file_only(browser: Browser, stack: Any) -> None:
    """Files above 8 MiB: the page asks for a tus endpoint (an upload token for that size and
    folder, spent by the upload's creation), with the same CSRF header as the upload route."""
    folder = folder_of(
        browser.http.post(f"{browser.files}/folders", data={"csrf_token": browser.csrf, "name": "big"})
    )

    def ask(size: int, folder_id: str = folder, csrf: str | None = None) -> httpx.Response:
        return browser.http.post(
            f"{browser.files}/resumable",
            params={"size": size, "folder": folder_id},
            headers={"x-csrf-token": browser.csrf if csrf is None else csrf},
        )

    assert ask(10, csrf="wrong").status_code == 403
    assert ask(100 * 1024 * 1024 + 1).json()["error"]["code"] == "file_too_large"
    assert ask(0).status_code == 400
    gone = ask(10, folder_id="fld_doesnotexist")
    assert gone.status_code == 404 and gone.json()["error"]["message"] == "The folder no longer exists."
    endpoint = ask(10).json()["endpoint"]
    assert endpoint.startswith("/api/uploads/tus?token=cof_upl_")
    tus = {"Tus-Resumable": "1.0.0", "Upload-Metadata": "filename YS5iaW4="}
    # The token holds that size at most, and is spent by one creation.
    assert (
        httpx.post(stack.edge_url + endpoint, headers={**tus, "Upload-Length": "11"}, verify=TLS).status_code
        == 413
    )
    created = httpx.post(stack.edge_url + endpoint, headers={**tus, "Upload-Length": "10"}, verify=TLS)
    assert created.status_code == 201, created.text
    assert (
        httpx.post(stack.edge_url + endpoint, headers={**tus, "Upload-Length": "10"}, verify=TLS).status_code
        == 401
    )
    done = httpx.patch(
        created.headers["location"],
        content=b"0123456789",
        headers={
            "Tus-Resumable": "1.0.0",
            "Upload-Offset": "0",
            "Content-Type": "application/offset+octet-stream",
        },
        verify=TLS,
    )
    assert done.status_code == 204, done.text
    asset = browser.http.get(f"{browser.files}/{done.headers['coffer-asset-id']}")
    assert asset.status_code == 200 and "a.bin" in asset.text and folder in asset.text


def test_folder_refusals_and_the_delete_summary(browser: Browser) -> None:
    photos = folder_of(browser.post(f"{browser.files}/folders", {"name": "Photos"}))
    duplicate = browser.post(f"{browser.files}/folders", {"name": "Photos"})
    assert duplicate.status_code == 409
    assert "A folder named &#39;Photos&#39; already exists here." in duplicate.text
    for bad in ("a/b", "..", ""):
        answer = browser.post(f"{browser.files}/folders", {"name": bad})
        assert answer.status_code == 400, (bad, answer.text)
        assert 'class="alert error"' in answer.text
    trips = folder_of(browser.post(f"{browser.files}/folders", {"name": "Trips", "parent": photos}))
    deep = folder_of(browser.post(f"{browser.files}/folders", {"name": "2026", "parent": trips}))
    for folder in (photos, trips, deep):
        assert browser.upload_xhr(b"p" * 10, folder=folder).status_code == 201

    cycle = browser.post(f"{browser.files}/folders/{photos}/move", {"parent": deep})
    assert cycle.status_code == 409
    assert "A folder cannot move into itself or one of its subfolders." in cycle.text
    renamed = browser.post(f"{browser.files}/folders/{trips}/rename", {"name": "Photos"})
    assert renamed.status_code == 303  # a child may share its parent's name

    summary = browser.http.get(f"{browser.files}/folders/{photos}/delete").text
    assert "Deletes this folder and 2 subfolders. The 3 files inside them move to the root" in summary
    done = browser.post(f"{browser.files}/folders/{photos}/delete")
    assert done.status_code == 303 and done.headers["location"].endswith("/files?done=folder-deleted")
    root = browser.http.get(browser.files).text
    assert root.count('<tr id="asset-') == 3 and 'id="folders"' not in root
    assert browser.http.get(f"{browser.files}?folder={trips}").status_code == 404

    audit = audit_once(browser, lambda text: "folder.deleted" in text)
    assert audit.count("folder.created") == 3 and audit.count("asset.uploaded") == 3
    # One event per folder deleted: the folder and its two subfolders.
    assert audit.count("folder.deleted") == 3


def test_renames_and_moves_are_audited(browser: Browser) -> None:
    a = folder_of(browser.post(f"{browser.files}/folders", {"name": "Drafts"}))
    b = folder_of(browser.post(f"{browser.files}/folders", {"name": "Archive"}))
    assert browser.post(f"{browser.files}/folders/{a}/rename", {"name": "Final"}).status_code == 303
    assert browser.post(f"{browser.files}/folders/{a}/move", {"parent": b}).status_code == 303
    asset = browser.upload_xhr(b"r" * 10, "before.txt").json()["asset"]
    page = f"{browser.files}/{asset['id']}"
    assert browser.post(f"{page}/rename", {"name": "after.txt"}).status_code == 303
    assert browser.post(f"{page}/move", {"parent": b}).status_code == 303
    # A refused rename changes nothing and records nothing.
    assert browser.post(f"{page}/rename", {"name": "a/b"}).status_code == 400

    audit = audit_once(browser, lambda text: "asset.moved" in text)
    for action in ("folder.renamed", "folder.moved", "asset.renamed", "asset.moved"):
        assert audit.count(action) == 1, action
    assert "Final" in audit and "after.txt" in audit


def test_the_audit_export_never_hands_a_spreadsheet_a_formula(browser: Browser) -> None:
    """Issue 23: a file named like a formula reached the CSV export as one."""
    names = ["=SUM(A1,A2)", "+1+1", "-2", "@SUM(A1)", "plain.txt"]
    for name in names:
        assert browser.upload_xhr(b"f", name).status_code == 201
    exported = audit_once(browser, lambda text: text.count("asset.uploaded") == 5, "/export.csv")
    rows = csv.DictReader(io.StringIO(exported))
    labels = [row["targetLabel"] for row in rows if row["targetType"] == "asset"]
    assert sorted(labels) == sorted(["'" + n for n in names[:4]] + ["plain.txt"])
    # JSON Lines keep the names as they are.
    lines = browser.http.get(f"/dashboard/o/{browser.org_id}/audit/export.jsonl").text.splitlines()
    events = [json.loads(line) for line in lines]
    assert sorted(e["targetLabel"] for e in events if e["targetType"] == "asset") == sorted(names)


def test_the_dashboard_signs_no_url_of_a_quarantined_file(browser: Browser, stack: Any) -> None:
    """Issue 48: GET /api/assets/:id/url refused a quarantined file (409), but the dashboard's
    signed URL and download signed it (its resized URL checks the same, for images)."""
    asset = browser.upload_xhr(b"X5O!P%@AP[4\\PZX54(P^)7CC)7}$EICAR", "e.com").json()["asset"]
    engine = create_engine(stack.metadata_database_url)
    try:
        with engine.begin() as db:  # what the scan relay records for an infected file
            db.execute(
                text(
                    "UPDATE assets SET scan_status = 'infected', scan_signature = 'Eicar-Test' WHERE id = :id"
                ),
                {"id": asset["id"]},
            )
    finally:
        engine.dispose()
    page = f"{browser.files}/{asset['id']}"
    shown = browser.http.get(page).text
    assert "quarantined" in shown and 'id="download"' not in shown  # no button that would fail
    signed = browser.post(f"{page}/signed-url", {"expiry": "3600"})
    assert signed.status_code == 409 and "quarantined" in signed.text and 'id="signed-url"' not in signed.text
    download = browser.http.get(f"{page}/download")
    assert download.status_code == 409 and "location" not in download.headers


def test_signed_urls_and_another_orgs_asset(browser: Browser, stack: Any) -> None:
    asset = browser.upload_xhr(b"signed bytes", "s.txt").json()["asset"]
    page = f"{browser.files}/{asset['id']}"
    for custom in ("0", "604801", "soon"):
        answer = browser.post(f"{page}/signed-url", {"expiry": "custom", "custom": custom})
        assert answer.status_code == 400
        assert "The expiry is whole seconds from 1 to 604,800." in answer.text
    fragment = browser.post(
        f"{page}/signed-url", {"expiry": "custom", "custom": "60"}, headers={"hx-request": "true"}
    )
    assert fragment.status_code == 200 and "<html" not in fragment.text
    url = re.search(r'id="signed-url" value="([^"]+)"', fragment.text)
    assert url and url.group(1).startswith(stack.public_cdn_url)
    fetched = httpx.get(url.group(1).replace("&amp;", "&"), verify=TLS)
    assert fetched.status_code == 200 and fetched.content == b"signed bytes"
    assert "signed_url.created" in browser.http.get(f"/dashboard/o/{browser.org_id}/audit").text

    stranger = sign_up(stack.edge_url, "Elsewhere")
    try:
        assert stranger.http.get(f"{stranger.files}/{asset['id']}").status_code == 404
        assert stranger.post(f"{stranger.files}/{asset['id']}/delete").status_code == 404
        assert stranger.http.get(f"{stranger.files}/not-an-id").status_code == 404
    finally:
        stranger.http.close()
    assert browser.http.get(page).status_code == 200


def test_another_orgs_folder_is_not_found_as_a_moves_or_uploads_destination(
    browser: Browser, stack: Any
) -> None:
    """Another organization's folder id, as where a file moves or an upload goes, reads as one
    that does not exist: the same 404, the same words (metadata's 403 "belongs to another
    organization" was an existence oracle across organizations)."""
    asset = browser.upload_xhr(b"stays", "stays.txt").json()["asset"]
    stranger = sign_up(stack.edge_url, "Elsewhere")
    try:
        theirs = folder_of(stranger.post(f"{stranger.files}/folders", {"name": "Theirs"}))
    finally:
        stranger.http.close()
    made_up = new_id("fld")
    for folder in (theirs, made_up):
        moved = browser.post(f"{browser.files}/{asset['id']}/move", {"parent": folder})
        assert moved.status_code == 404, (folder, moved.status_code)
        assert "There is nothing here, or you do not have access to it." in moved.text
        assert "another organization" not in moved.text and folder not in moved.text
        scripted = browser.upload_xhr(b"x", folder=folder)
        assert scripted.status_code == 404, (folder, scripted.status_code)
        assert scripted.json()["error"]["message"] == "The folder no longer exists."
        plain = browser.upload_form([("csrf_token", browser.csrf), ("file", b"y")], folder=folder)
        assert plain.status_code == 404 and "The folder no longer exists." in plain.text
        resumable = browser.http.post(
            f"{browser.files}/resumable",
            params={"size": 10, "folder": folder},
            headers={"x-csrf-token": browser.csrf},
        )
        assert resumable.status_code == 404, (folder, resumable.status_code)
        assert resumable.json()["error"]["message"] == "The folder no longer exists."
    page = browser.http.get(f"{browser.files}/{asset['id']}").text
    assert theirs not in page
    assert browser.counts() == (5, 1)


def test_another_orgs_trashed_file_is_not_found_in_the_trash(
    browser: Browser, stack: Any, admin: Any
) -> None:
    """Restoring or purging another organization's trashed file from one's own Trash answers as
    for an id that was never there (metadata's 403 told them apart); a member's refusal for what
    someone else of the organization deleted keeps its 403 and its reason."""
    stranger = sign_up(stack.edge_url, "Elsewhere")
    member = sign_up(stack.edge_url, "Member's own")
    try:
        for b in (browser, stranger):
            admin("set-trash-retention", "--org", b.org_id, "--days", "7")
        theirs = stranger.upload_xhr(b"theirs", "theirs.txt").json()["asset"]["id"]
        assert stranger.post(f"{stranger.files}/{theirs}/delete").status_code == 303
        assert theirs in stranger.http.get(f"{stranger.files}/trash").text
        mine = browser.upload_xhr(b"mine", "mine.txt").json()["asset"]["id"]
        assert browser.post(f"{browser.files}/{mine}/delete").status_code == 303

        for action in ("restore", "purge"):
            answers = {
                asset_id: browser.post(f"{browser.files}/trash/{asset_id}/{action}")
                for asset_id in (theirs, new_id("ast"))
            }
            for asset_id, answer in answers.items():
                assert answer.status_code == 404, (action, asset_id, answer.status_code)
                assert "That file is not in the trash." in answer.text, answer.text[-2000:]
                assert "another organization" not in answer.text and asset_id not in answer.text
        assert theirs in stranger.http.get(f"{stranger.files}/trash").text  # untouched

        admin("add-member", "--org", browser.org_id, "--user", member.email, "--role", "member")
        shared = Browser(member.http, browser.org_id, member.csrf, member.email)
        refused = shared.post(f"{shared.files}/trash/{mine}/restore")
        assert refused.status_code == 403, refused.status_code
        assert "Members may restore or purge only what they deleted themselves." in refused.text
    finally:
        stranger.http.close()
        member.http.close()


def test_pages_of_fifty_and_search_across_folders(browser: Browser) -> None:
    inner = folder_of(browser.post(f"{browser.files}/folders", {"name": "Inner"}))
    for n in range(51):
        assert browser.upload_xhr(b"n", f"file-{n:02}.txt").status_code == 201
    assert browser.upload_xhr(b"n", "needle-in-folder.txt", folder=inner).status_code == 201
    first = browser.http.get(browser.files).text
    assert first.count('<tr id="asset-') == 50 and "page 1 of 2" in first
    assert "file-50.txt" in first and "file-00.txt" not in first  # newest first
    second = browser.http.get(f"{browser.files}?page=2").text
    assert second.count('<tr id="asset-') == 1 and "file-00.txt" in second
    assert 'rel="prev"' in second and 'rel="next"' not in second
    found = browser.http.get(f"{browser.files}?q=NEEDLE").text
    assert found.count('<tr id="asset-') == 1 and "needle-in-folder.txt" in found
    none = browser.http.get(f"{browser.files}?q=absent").text
    assert "No file name contains “absent”." in none
    ref = f"http://cdn.example/{browser.org_id}/ast_0123456789ABCDEF/x.txt"
    opened = browser.http.get(f"{browser.files}/open", params={"ref": ref})
    assert opened.status_code == 303 and opened.headers["location"].endswith("/files/ast_0123456789ABCDEF")
    assert browser.http.get(f"{browser.files}/open", params={"ref": "nothing"}).status_code == 400


def test_counts_read_as_english(browser: Browser) -> None:
    """One file of one byte: "1 byte", "1 file", "1 asset" on the pages that count them."""
    made = browser.upload_xhr(b"x", "one.bin")
    assert made.status_code == 201, made.text
    asset_id = made.json()["asset"]["id"]

    def text(path: str) -> str:  # the page as read, without its tags
        return re.sub(r"<[^>]+>", "", browser.http.get(path).text)

    assert "1 byte in 1 file\n" in text(browser.files)
    assert "(1 byte)" in text(f"{browser.files}/{asset_id}")
    assert "1 asset, 1 byte." in text(f"/dashboard/o/{browser.org_id}/usage")


def test_visibility_switch_default_and_who_may(browser: Browser, stack: Any, admin: Any) -> None:
    """CONTRACT §12 in the dashboard: the file page's switch (members too), the organization's
    default in Settings (owners only), their audit events, and another organization's asset."""
    asset = browser.upload_xhr(b"v" * 10, "v.txt").json()["asset"]
    page = f"{browser.files}/{asset['id']}"
    made = browser.post(f"{page}/visibility", {"visibility": "private"})
    assert (made.status_code, made.headers["location"]) == (303, f"{page}?done=private")
    shown = browser.http.get(page).text
    assert 'id="asset-visibility">Private<' in shown and 'id="public-url"' not in shown
    deadline = time.monotonic() + 5
    while httpx.get(asset["publicUrl"], verify=TLS).status_code != 404:
        assert time.monotonic() < deadline, "the CDN still serves the file 5 s after the switch"
        time.sleep(0.05)
    assert 'class="visibility nowrap">Private<' in browser.http.get(browser.files).text
    assert browser.post(f"{page}/visibility", {"visibility": "private"}).status_code == 303  # no change
    assert browser.post(f"{page}/visibility", {"visibility": "hidden"}).status_code == 400
    audit = audit_once(browser, lambda text: "asset.visibility_changed" in text)
    assert audit.count("asset.visibility_changed") == 1

    settings = f"/dashboard/o/{browser.org_id}/settings"
    other = sign_up(stack.edge_url, "Elsewhere")
    try:
        assert (
            other.post(f"{other.files}/{asset['id']}/visibility", {"visibility": "public"}).status_code == 404
        )
        admin("add-member", "--org", browser.org_id, "--user", other.email, "--role", "member")
        # A member may switch a file but not the organization's default.
        as_member = other.post(f"{page}/visibility", {"visibility": "public"})
        assert as_member.status_code == 303, as_member.text
        assert other.post(f"{settings}/default-visibility", {"visibility": "private"}).status_code == 403
        member_view = other.http.get(settings).text
        assert 'id="default-visibility-value">public<' in member_view
        assert "save-default-visibility" not in member_view
    finally:
        other.http.close()

    assert browser.post(f"{settings}/default-visibility", {"visibility": "secret"}).status_code == 400
    changed = browser.post(f"{settings}/default-visibility", {"visibility": "private"})
    assert changed.status_code == 303, changed.text
    assert "New uploads are now private" in browser.http.get(changed.headers["location"]).text
    later = browser.upload_xhr(b"later", "later.txt").json()["asset"]
    assert (later["visibility"], later["publicUrl"]) == ("private", None)
    assert "org.default_visibility_changed" in browser.http.get(f"/dashboard/o/{browser.org_id}/audit").text


def test_a_key_expiring_in_the_year_9999_is_refused_with_a_message(browser: Browser) -> None:
    """Issue 23: the day after 9999-12-31 overflowed: a 500."""
    keys = f"/dashboard/o/{browser.org_id}/keys"
    form = {"form_id": "f", "kind": "user", "name": "far", "expiry": "date", "expiry_date": "9999-12-31"}
    refused = browser.post(keys, form)
    assert refused.status_code == 400, refused.text[:500]
    assert "The expiry date must be within 10 years." in refused.text
    ten_years = browser.post(keys, {**form, "expiry_date": "2035-01-01"})
    assert ten_years.status_code == 201, ten_years.text[:500]


def test_a_line_break_in_a_dashboard_path_is_a_404_not_a_500(browser: Browser, stack: Any) -> None:
    """Issue 23: a CR/LF after the organization's id reached an internal call's header: a 500."""
    for tail in ("%0d%0a", "%0a", "%0d%0aX-Injected:%201"):
        answer = browser.http.get(f"/dashboard/o/{browser.org_id}{tail}")
        assert answer.status_code == 404, (tail, answer.status_code)
    # Nor does a line break in the page to return to after signing in reach Location.
    http = httpx.Client(base_url=stack.edge_url, headers=SAME_ORIGIN, timeout=60)
    email, password = f"next-{secrets.token_hex(4)}@example.com", "pw-" + secrets.token_urlsafe(16)
    assert http.post("/dashboard/register", data={"email": email, "password": password}).status_code == 303
    form = {"email": email, "password": password, "next": "/dashboard/orgs\r\nX-Injected: 1"}
    signed_in = http.post("/dashboard/login", data=form)
    assert signed_in.status_code == 303, signed_in.text[:300]
    assert signed_in.headers["location"] == "/dashboard/orgs" or "\n" not in signed_in.headers["location"]
    assert "x-injected" not in signed_in.headers
    http.close()


def test_a_password_past_the_bound_is_refused_never_cut_short(stack: Any) -> None:
    """The sign-up form cut passwords at 1,024 characters: auth's bound never refused one, and
    whatever followed character 1,024 signed in too."""
    http = httpx.Client(base_url=stack.edge_url, headers=SAME_ORIGIN, timeout=60)
    email, base = f"long-{secrets.token_hex(4)}@example.com", secrets.token_urlsafe(1024)[:1024]
    refused = http.post("/dashboard/register", data={"email": email, "password": base + "TAIL-ONE"})
    assert refused.status_code == 400, refused.status_code
    assert "at most 1024 characters" in refused.text
    assert http.post("/dashboard/register", data={"email": email, "password": base}).status_code == 303
    other = http.post("/dashboard/login", data={"email": email, "password": base + "another-tail"})
    assert other.status_code != 303 and "__Host-coffer_session" not in other.headers.get("set-cookie", "")
    assert http.post("/dashboard/login", data={"email": email, "password": base}).status_code == 303
    http.close()


def metadata_calls(route_prefix: str) -> float:
    """Calls metadata has answered on its routes under ``route_prefix``, in this process (the
    in-process stack)."""
    return sum(
        sample.value
        for metric in HTTP_REQUESTS.collect()
        for sample in metric.samples
        if sample.name == "coffer_http_requests_total"
        and sample.labels["service"] == "metadata"
        and sample.labels["route"].startswith(route_prefix)
    )


def _metadata_folder_calls() -> float:
    return metadata_calls("/internal/v1/orgs/{org_id}/folders")


def test_the_folder_delete_page_asks_metadata_a_fixed_number_of_times(browser: Browser) -> None:
    """Issue 23: the page made two internal calls per folder of the subtree (a big tree cost
    thousands); now the counts come from one query, whatever the tree's size."""
    top = folder_of(browser.post(f"{browser.files}/folders", {"name": "Top"}))
    parent = top
    for depth in range(12):
        parent = folder_of(browser.post(f"{browser.files}/folders", {"name": f"d{depth}", "parent": parent}))
    before = _metadata_folder_calls()
    page = browser.http.get(f"{browser.files}/folders/{top}/delete")
    assert "Deletes this folder and 12 subfolders." in page.text
    assert _metadata_folder_calls() - before <= 3


def test_the_usage_page_lists_unfinished_uploads_and_ends_one(browser: Browser, stack: Any) -> None:
    """Issue 44: the organization sees its open resumable uploads, what each holds, and ends
    one (CSRF-checked); another organization's member cannot end it."""
    endpoint = browser.http.post(
        f"{browser.files}/resumable", params={"size": 5000}, headers={"x-csrf-token": browser.csrf}
    ).json()["endpoint"]
    tus = {"Tus-Resumable": "1.0.0", "Upload-Metadata": "filename c3F1YXR0ZXIuYmlu", "Upload-Length": "5000"}
    created = httpx.post(stack.edge_url + endpoint, headers=tus, verify=TLS)
    assert created.status_code == 201, created.text
    upload_id = created.headers["location"].split("?")[0].rsplit("/", 1)[1]
    usage = f"/dashboard/o/{browser.org_id}/usage"
    page = browser.http.get(usage).text
    assert f'id="upload-{upload_id}"' in page and "squatter.bin" in page
    assert 'id="held-bytes">4.9 KiB<' in page
    end = f"/dashboard/o/{browser.org_id}/uploads/{upload_id}/end"
    assert browser.http.post(end, data={"csrf_token": "wrong"}).status_code == 403
    stranger = sign_up(stack.edge_url, "Elsewhere")
    assert stranger.post(f"/dashboard/o/{stranger.org_id}/uploads/{upload_id}/end").status_code == 404
    stranger.http.close()
    ended = browser.post(end)
    assert ended.status_code == 303 and ended.headers["location"] == f"{usage}?ended=1"
    page = browser.http.get(f"{usage}?ended=1").text
    assert "The upload was ended" in page and f"upload-{upload_id}" not in page
    assert "No unfinished uploads." in page
    assert (
        httpx.head(created.headers["location"], headers={"Tus-Resumable": "1.0.0"}, verify=TLS).status_code
        == 404
    )
    assert browser.post(end).status_code == 404


def test_a_resumable_upload_of_a_member_removed_ends(browser: Browser, stack: Any, admin: Any) -> None:
    """Issue 44: the dashboard's resumable uploads carry their user: once that user is no
    longer a member, the upload's capability is refused and the upload terminated."""
    endpoint = browser.http.post(
        f"{browser.files}/resumable", params={"size": 100}, headers={"x-csrf-token": browser.csrf}
    ).json()["endpoint"]
    tus = {"Tus-Resumable": "1.0.0", "Upload-Metadata": "filename YS5iaW4=", "Upload-Length": "100"}
    created = httpx.post(stack.edge_url + endpoint, headers=tus, verify=TLS)
    assert created.status_code == 201, created.text
    url = created.headers["location"]
    chunk = {"Tus-Resumable": "1.0.0", "Content-Type": "application/offset+octet-stream"}
    assert (
        httpx.patch(url, content=b"x" * 50, headers={**chunk, "Upload-Offset": "0"}, verify=TLS).status_code
        == 204
    )
    other = admin(
        "create-user",
        "--email",
        f"o{secrets.token_hex(4)}@example.com",
        "--password",
        "pw-" + secrets.token_urlsafe(16),  # never "-…", which argparse takes for an option
    )
    admin("add-member", "--org", browser.org_id, "--user", other["id"], "--role", "owner")
    admin("remove-member", "--org", browser.org_id, "--user", browser.email)
    deadline = time.monotonic() + 15
    while (status := httpx.head(url, headers={"Tus-Resumable": "1.0.0"}, verify=TLS).status_code) == 200:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert status == 401
    gone = httpx.patch(url, content=b"x" * 50, headers={**chunk, "Upload-Offset": "50"}, verify=TLS)
    assert gone.status_code == 404, gone.text
    assert stack.metadata_scalar("SELECT count(*) FROM tus_uploads") == 0


def test_the_signed_urls_a_member_made_die_when_they_leave(browser: Browser, admin: Any) -> None:
    """A link made on the dashboard carries its member's authority: once the member leaves,
    the CDN refuses it (the relay carries the removal to blob within seconds)."""
    asset = browser.upload_xhr(b"shared bytes", "s.txt").json()["asset"]
    made = browser.post(
        f"{browser.files}/{asset['id']}/signed-url",
        {"expiry": "custom", "custom": "86400"},
        headers={"hx-request": "true"},
    )
    url = re.search(r'id="signed-url" value="([^"]+)"', made.text)
    assert url
    link = url.group(1).replace("&amp;", "&")
    assert httpx.get(link, verify=TLS).content == b"shared bytes"
    other = admin(
        "create-user",
        "--email",
        f"o{secrets.token_hex(4)}@example.com",
        "--password",
        "pw-" + secrets.token_urlsafe(16),
    )
    admin("add-member", "--org", browser.org_id, "--user", other["id"], "--role", "owner")
    assert browser.post(f"/dashboard/o/{browser.org_id}/leave", {}).status_code == 303
    deadline = time.monotonic() + 10
    while (answer := httpx.get(link, verify=TLS)).status_code == 200:
        assert time.monotonic() < deadline, "the link outlived the membership"
        time.sleep(0.1)
    assert answer.status_code == 403
    assert answer.json()["error"]["message"].startswith("This signed URL was revoked")


def test_a_browser_that_signed_in_before_is_not_refused_for_anothers_guesses(stack: Any) -> None:
    """Five wrong passwords from a network made the owner's own browser there wait too. A
    browser that signed in keeps a device cookie, and the throttle counts its failures apart:
    the guesser waits, the owner's browser signs in (and keeps the cookie it has)."""
    email, password = f"d{secrets.token_hex(4)}@example.com", "pw-" + secrets.token_urlsafe(16)
    with (
        httpx.Client(base_url=stack.edge_url, headers=SAME_ORIGIN, timeout=60, verify=TLS) as owner,
        httpx.Client(base_url=stack.edge_url, headers=SAME_ORIGIN, timeout=60, verify=TLS) as guesser,
    ):
        registered = owner.post("/dashboard/register", data={"email": email, "password": password})
        assert registered.status_code == 303, registered.text
        device = registered.cookies[DEVICE_COOKIE]
        for n in range(5):
            wrong = guesser.post("/dashboard/login", data={"email": email, "password": f"wrong {n}"})
            assert wrong.status_code == 400
        assert (
            guesser.post("/dashboard/login", data={"email": email, "password": password}).status_code == 429
        )
        back = owner.post(
            "/dashboard/login",
            data={"email": email, "password": password},
            headers={"cookie": f"{DEVICE_COOKIE}={device}"},
        )
        assert back.status_code == 303, back.text
        assert COOKIE in back.cookies and DEVICE_COOKIE not in back.cookies


def keep_cookies(b: Browser, answer: httpx.Response) -> None:
    """As a browser does: the cookies an answer sets go with the next requests (by hand, as
    sign_up sends the session's: httpx keeps Secure cookies to https, these tests speak http)."""
    jar = dict(pair.split("=", 1) for pair in b.http.headers["cookie"].split("; ") if "=" in pair)
    jar.update(answer.cookies)
    b.http.headers["cookie"] = "; ".join(f"{name}={value}" for name, value in jar.items())


def signed_in(edge_url: str, email: str, password: str, org_id: str) -> Browser:
    """Another session of a user (a sign-in of its own), on the organization's files page."""
    http = httpx.Client(base_url=edge_url, headers=SAME_ORIGIN, timeout=60, verify=TLS)
    answer = http.post("/dashboard/login", data={"email": email, "password": password})
    assert answer.status_code == 303, answer.text
    http.headers["cookie"] = f"{COOKIE}={answer.cookies[COOKIE]}"
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', http.get(f"/dashboard/o/{org_id}/files").text)
    assert csrf
    return Browser(http, org_id, csrf.group(1), email)


def test_signing_out_ends_the_unfinished_uploads_the_session_started(stack: Any) -> None:
    """A resumable upload started from the dashboard could be finished with its URL (which the
    page kept in the browser) after the session signed out: its capability is the user's, not
    the session's, for up to a day. Signing out now terminates the unfinished uploads this
    session started, and asks the browser to clear its storage; another session's go on."""
    password = "pw-" + secrets.token_urlsafe(16)
    email = f"leaves-{secrets.token_hex(4)}@example.com"
    first = httpx.Client(base_url=stack.edge_url, headers=SAME_ORIGIN, timeout=60, verify=TLS)
    registered = first.post("/dashboard/register", data={"email": email, "password": password})
    assert registered.status_code == 303, registered.text
    first.headers["cookie"] = f"{COOKIE}={registered.cookies[COOKIE]}"
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', first.get("/dashboard/orgs/new").text)
    assert csrf
    made = first.post("/dashboard/orgs/new", data={"csrf_token": csrf.group(1), "name": "Leavers"})
    assert made.status_code == 303, made.text
    org_id = made.headers["location"].rsplit("/", 1)[1]
    first.close()
    leaving = signed_in(stack.edge_url, email, password, org_id)
    staying = signed_in(stack.edge_url, email, password, org_id)
    tus = {"Tus-Resumable": "1.0.0", "Upload-Metadata": "filename aGFsZi5iaW4="}
    chunk = {"Tus-Resumable": "1.0.0", "Content-Type": "application/offset+octet-stream"}

    def start(b: Browser, half: bool = True) -> str:
        """A 100-byte upload through the page's route, its first half sent; its URL."""
        asked = b.http.post(f"{b.files}/resumable", params={"size": 100}, headers={"x-csrf-token": b.csrf})
        assert asked.status_code == 200, asked.text
        keep_cookies(b, asked)
        endpoint = stack.edge_url + asked.json()["endpoint"]
        created = httpx.post(endpoint, headers={**tus, "Upload-Length": "100"}, verify=TLS)
        assert created.status_code == 201, created.text
        url = str(created.headers["location"])
        if half:
            sent = httpx.patch(url, content=b"x" * 50, headers={**chunk, "Upload-Offset": "0"}, verify=TLS)
            assert sent.status_code == 204, sent.text
        return url

    def rest(url: str) -> httpx.Response:
        return httpx.patch(url, content=b"y" * 50, headers={**chunk, "Upload-Offset": "50"}, verify=TLS)

    def state(url: str) -> int:
        return httpx.head(url, headers={"Tus-Resumable": "1.0.0"}, verify=TLS).status_code

    try:
        left = [start(leaving), start(leaving)]
        kept = start(staying)
        signed_out = leaving.post("/dashboard/logout")
        assert signed_out.status_code == 303, signed_out.text
        assert signed_out.headers["clear-site-data"] == '"cache", "storage"'
        for url in left:
            deadline = time.monotonic() + 5  # (edge's cache of the minter's answer)
            while state(url) == 200:
                assert time.monotonic() < deadline, "an upload outlived the session that began it"
                time.sleep(0.05)
            assert rest(url).status_code in (401, 404)  # ended: its bytes and reservation released
        finished = rest(kept)
        assert finished.status_code == 204, finished.text
        assert staying.counts() == (100, 1)
    finally:
        leaving.http.close()
        staying.http.close()


def test_a_demoted_owner_or_removed_member_acts_at_once_with_what_is_left(
    browser: Browser, stack: Any, admin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """edge checks some roles itself (emptying the trash, webhooks) and metadata none: a page
    read caches the role for up to COFFER_EDGE_AUTH_CACHE_SECONDS (5 s by default, here
    stretched to a minute), and a demoted owner emptied the trash within it, a removed member
    deleted files. A change asks auth for the role it acts with."""
    real = AccountsClient.current

    async def current(self: AccountsClient, *args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(self, "cache_seconds", 60.0)  # (undone after the test)
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(AccountsClient, "current", current)
    other = sign_up(stack.edge_url, "Theirs")
    try:
        admin("add-member", "--org", browser.org_id, "--user", other.email, "--role", "owner")
        shared = Browser(other.http, browser.org_id, other.csrf, other.email)
        assert shared.http.get(f"{shared.files}/trash").status_code == 200  # the role, cached
        admin("set-role", "--org", browser.org_id, "--user", other.email, "--role", "member")
        refused = shared.post(f"{shared.files}/trash/empty")
        assert refused.status_code == 403, refused.text
        assert "Only owners" in refused.text

        asset = browser.upload_xhr(b"kept", "kept.txt").json()["asset"]
        assert shared.http.get(shared.files).status_code == 200  # the membership, cached
        admin("remove-member", "--org", browser.org_id, "--user", other.email)
        gone = shared.post(f"{shared.files}/{asset['id']}/delete")
        assert gone.status_code == 404, gone.text  # no longer a member: no such organization
        assert browser.counts() == (4, 1)
    finally:
        other.http.close()


# Metadata and tags (issue 50) ---------------------------------------------------------------


def test_form_values() -> None:
    assert [form_value(v, t) for v, t in (("3", "number"), ("-1.5", "number"), ("2e6", "number"))] == [
        3,
        -1.5,
        2e6,
    ]
    assert (form_value(" TRUE ", "boolean"), form_value("false", "boolean")) == (True, False)
    assert form_value(" spaced ", "text") == " spaced "
    for value, kind in (("three", "number"), ("yes", "boolean"), ("x", "json")):
        with pytest.raises(CofferError):
            form_value(value, kind)


def test_the_placeholder_png_is_the_blurhash_librarys_decoding() -> None:
    hash_ = "LEHV6nWB2yk8pyo0adR*.7kCMdnj"
    assert placeholders.shape(None, None) == (8, 6)
    assert placeholders.shape(60, 30) == (8, 4) and placeholders.shape(30, 60) == (4, 8)
    assert placeholders.shape(1000, 1) == (8, 1)
    url = placeholders.data_url(hash_, 8, 6)
    assert url and url.startswith("data:image/png;base64,")
    png = base64.b64decode(url.split(",", 1)[1])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (8, 6)
    # The pixels are the library's decoding, each row after its filter byte.
    (idat_length,) = struct.unpack(">I", png[33:37])
    assert png[37:41] == b"IDAT"
    raw = zlib.decompress(png[41 : 41 + idat_length])
    rows = blurhash.decode(hash_, 8, 6)
    assert raw == b"".join(b"\x00" + bytes(c for px in row for c in px) for row in rows)
    assert placeholders.data_url("not a hash!", 8, 6) is None
    assert placeholders.data_url("", 8, 6) is None


def described(browser: Browser, asset_id: str) -> dict[str, Any]:
    """The metadata (as text) and tags the asset page shows."""
    answer = browser.http.get(f"{browser.files}/{asset_id}")
    assert answer.status_code == 200
    metadata = dict(
        re.findall(
            r'<td class="meta-key"><a [^>]*><code>([^<]*)</code></a></td>\s*<td class="meta-value">([^<]*)',
            answer.text,
        )
    )
    tags = re.findall(r'class="tag-link" href="[^"]*"[^>]*>([^<]*)</a>', answer.text)
    return {"metadata": {k: v.strip() for k, v in metadata.items()}, "tags": tags}


def test_metadata_and_tags_are_edited_on_the_asset_page(browser: Browser, stack: Any, admin: Any) -> None:
    """Set, change and delete a key, add and remove tags, as PATCH /api/assets/:id does (merge;
    the same asset.updated event, with the session's user as its actor); an owner and a member
    may, another organization's member and a post without the CSRF token may not; a value out
    of bounds is 400 with metadata's message, and nothing changes."""
    asset = browser.upload_xhr(b"d" * 10, "described.txt").json()["asset"]
    page = f"{browser.files}/{asset['id']}"
    first = browser.http.get(page).text
    assert 'id="no-tags"' in first and 'id="no-metadata"' in first

    made = browser.post(f"{page}/metadata", {"key": "camera", "value": "X100V", "type": "text"})
    assert (made.status_code, made.headers["location"]) == (303, f"{page}?done=metadata-set#description")
    assert (
        browser.post(f"{page}/metadata", {"key": "iso", "value": "400", "type": "number"}).status_code == 303
    )
    assert (
        browser.post(f"{page}/metadata", {"key": "raw", "value": "true", "type": "boolean"}).status_code
        == 303
    )
    assert (
        browser.post(f"{page}/metadata", {"key": "camera", "value": "Q3", "type": "text"}).status_code == 303
    )
    assert browser.post(f"{page}/tags", {"tags": "cover, 2026,trip/alps"}).status_code == 303
    shown = browser.http.get(f"{page}?done=tags-added").text
    assert "The tags are added." in shown
    assert f'href="{browser.files}?tag=trip/alps"' in shown
    assert described(browser, asset["id"]) == {
        "metadata": {"camera": "Q3", "iso": "400", "raw": "true"},
        "tags": ["2026", "cover", "trip/alps"],
    }
    assert '400 <span class="muted small">(number)</span>' in shown
    assert "style=" not in shown and "<script>" not in shown  # the CSP allows neither

    # Bounds: metadata's rules and messages (coffer_kit.contract.describe), nothing changed.
    before = stack.metadata_scalar("SELECT updated_at FROM assets WHERE id = :a", a=asset["id"])
    for path, form, message in (
        (
            f"{page}/metadata",
            {"key": "bad key", "value": "v", "type": "text"},
            "A metadata key is 1-64 characters",
        ),
        (
            f"{page}/metadata",
            {"key": "k" * 65, "value": "v", "type": "text"},
            "A metadata key is 1-64 characters",
        ),
        (f"{page}/metadata", {"key": "long", "value": "v" * 257, "type": "text"}, "at most 256 characters"),
        (f"{page}/metadata", {"key": "n", "value": "many", "type": "number"}, "is not a number"),
        (f"{page}/metadata", {"key": "n", "value": "1e999", "type": "number"}, "must be finite"),
        (f"{page}/tags", {"tags": "has space"}, "A tag is 1-64 characters"),
        (f"{page}/tags", {"tags": " , "}, "Write a tag."),
        (f"{page}/tags", {"tags": ",".join(f"t{n}" for n in range(30))}, "at most 32 tags"),
        (f"{page}/tags/remove", {"tag": "bad tag"}, "A tag is 1-64 characters"),
        (f"{page}/metadata/delete", {"key": "bad key"}, "A metadata key is 1-64 characters"),
    ):
        refused = browser.post(path, form)
        assert refused.status_code == 400, (path, form, refused.status_code)
        assert message in refused.text, (form, message)
        assert 'class="alert error"' in refused.text
    kept = browser.post(f"{page}/metadata", {"key": "bad key", "value": "kept", "type": "number"}).text
    assert 'value="bad key"' in kept and 'value="kept"' in kept  # the form as sent
    assert stack.metadata_scalar("SELECT updated_at FROM assets WHERE id = :a", a=asset["id"]) == before

    # No CSRF token, or a cross-origin post: refused before anything changes.
    assert browser.http.post(f"{page}/tags", data={"tags": "sneaky"}).status_code == 403
    assert (
        browser.http.post(
            f"{page}/metadata", data={"csrf_token": "wrong", "key": "a", "value": "b"}
        ).status_code
        == 403
    )
    cross = browser.http.post(
        f"{page}/tags",
        data={"csrf_token": browser.csrf, "tags": "sneaky"},
        headers={"sec-fetch-site": "cross-site"},
    )
    assert cross.status_code == 403

    # Another organization's member: the asset is not found; then, made a member, they may.
    other = sign_up(stack.edge_url, "Elsewhere")
    try:
        assert other.post(f"{other.files}/{asset['id']}/tags", {"tags": "theirs"}).status_code == 404
        assert other.post(f"{page}/tags", {"tags": "theirs"}).status_code == 404
        assert other.post(f"{page}/metadata", {"key": "x", "value": "y", "type": "text"}).status_code == 404
        admin("add-member", "--org", browser.org_id, "--user", other.email, "--role", "member")
        assert other.post(f"{page}/tags", {"tags": "by-member"}).status_code == 303
        assert other.post(f"{page}/tags/remove", {"tag": "cover"}).status_code == 303
        assert other.post(f"{page}/metadata/delete", {"key": "raw"}).status_code == 303
    finally:
        other.http.close()
    assert browser.post(f"{page}/tags/remove", {"tag": "2026"}).status_code == 303
    assert browser.post(f"{page}/metadata/delete", {"key": "absent"}).status_code == 303  # no change
    assert described(browser, asset["id"]) == {
        "metadata": {"camera": "Q3", "iso": "400"},
        "tags": ["by-member", "trip/alps"],
    }

    # The same events as the public PATCH: asset.updated with the previous values, by the user.
    with stack.metadata_engine.connect() as conn:
        events = conn.execute(
            text("SELECT changes, actor FROM events WHERE type = 'asset.updated' AND organization_id = :o"),
            {"o": browser.org_id},
        ).all()
    changes = [json.loads(e.changes) for e in events]
    actors = [json.loads(e.actor) for e in events]
    assert {"metadata": {"camera": "X100V", "iso": 400, "raw": True}} in changes
    assert {"tags": ["2026", "cover", "trip/alps"]} in changes
    assert all(a["type"] == "user" for a in actors)
    assert {a["label"] for a in actors} == {browser.email, other.email}
    assert len(events) == 9  # 4 sets, 1 add, member's 3, owner's remove; the no-op writes none


def test_the_tag_filter_lists_matching_assets_of_every_folder_with_their_paths(browser: Browser) -> None:
    """``tag=`` (issue 50): the organization's assets with every tag given, with their paths."""
    outer = folder_of(browser.post(f"{browser.files}/folders", {"name": "Trips"}))
    inner = folder_of(browser.post(f"{browser.files}/folders", {"name": "Alps", "parent": outer}))
    root_one = browser.upload_xhr(b"1", "root.jpg").json()["asset"]
    deep = browser.upload_xhr(b"2", "deep.jpg", folder=inner).json()["asset"]
    other = browser.upload_xhr(b"3", "other.jpg", folder=outer).json()["asset"]
    for asset, tags in ((root_one, "summer,cover"), (deep, "summer"), (other, "winter")):
        assert browser.post(f"{browser.files}/{asset['id']}/tags", {"tags": tags}).status_code == 303

    listed = browser.http.get(browser.files, params={"tag": "summer"})
    assert listed.status_code == 200
    page = listed.text
    assert "Tagged: summer" in page
    rows = re.findall(r'<tr id="asset-(ast_\w+)"', page)
    assert sorted(rows) == sorted([root_one["id"], deep["id"]])
    assert f'<a href="{browser.files}?folder={inner}" title="/Trips/Alps">/Trips/Alps</a>' in page
    assert f'<a href="{browser.files}" title="The root">/</a>' in page
    assert 'id="upload-form"' not in page  # a listing across folders: nowhere to upload into
    assert f'<a href="{browser.files}?tag=cover">cover</a>' in page  # each row's tags
    # With a folder given, still the whole organization; with a search, both.
    assert sorted(
        re.findall(
            r'<tr id="asset-(ast_\w+)"',
            browser.http.get(browser.files, params={"tag": "summer", "folder": outer}).text,
        )
    ) == sorted(rows)
    both = browser.http.get(browser.files, params={"tag": "summer", "q": "deep"}).text
    assert re.findall(r'<tr id="asset-(ast_\w+)"', both) == [deep["id"]]
    none = browser.http.get(browser.files, params={"tag": "autumn"}).text
    assert "No file has the tag “autumn”." in none
    bad = browser.http.get(browser.files, params={"tag": "two+words"})
    assert bad.status_code == 400 and "A tag is 1-64 characters" in bad.text
    # Several tags, by commas or spaces: the files with every one of them (GET /api/assets's
    # tagMatch=all), at most as many as it takes.
    for several in ("summer, cover", "summer cover,summer"):
        page = browser.http.get(browser.files, params={"tag": several}).text
        assert "Tagged: summer, cover" in page
        assert re.findall(r'<tr id="asset-(ast_\w+)"', page) == [root_one["id"]]
    none = browser.http.get(browser.files, params={"tag": "summer,winter"}).text
    assert "No file has the tags “summer, winter”." in none
    many = browser.http.get(browser.files, params={"tag": ",".join(f"t{n}" for n in range(11))})
    assert many.status_code == 400 and "Filter by at most 10 tags." in many.text
    separators = browser.http.get(browser.files, params={"tag": " , ,"}).text  # no filter at all
    assert re.findall(r'<tr id="asset-(ast_\w+)"', separators) == [root_one["id"]]
    # The unfiltered root lists its own files only, each with its tags.
    plain = browser.http.get(browser.files).text
    assert re.findall(r'<tr id="asset-(ast_\w+)"', plain) == [root_one["id"]]
    assert f'<a href="{browser.files}?tag=summer">summer</a>' in plain


def test_the_metadata_filter_lists_matching_assets_of_every_folder(browser: Browser) -> None:
    """``meta=key=value`` (issue 50): the organization's assets whose metadata has it, with paths."""
    outer = folder_of(browser.post(f"{browser.files}/folders", {"name": "Products"}))
    shoe = browser.upload_xhr(b"1", "shoe.jpg", folder=outer).json()["asset"]
    hat = browser.upload_xhr(b"2", "hat.jpg").json()["asset"]
    sock = browser.upload_xhr(b"3", "sock.jpg").json()["asset"]
    for asset, sku in ((shoe, "9"), (hat, "9"), (sock, "10")):
        form = {"key": "sku", "value": sku, "type": "number"}
        assert browser.post(f"{browser.files}/{asset['id']}/metadata", form).status_code == 303

    page = browser.http.get(f"{browser.files}/{shoe['id']}").text
    assert (
        f'<a href="{browser.files}?meta=sku%3D9" title="Every file with sku = 9"><code>sku</code></a>' in page
    )
    listed = browser.http.get(browser.files, params={"meta": "sku=9"})
    assert listed.status_code == 200
    assert "Metadata: sku=9" in listed.text
    assert sorted(re.findall(r'<tr id="asset-(ast_\w+)"', listed.text)) == sorted([shoe["id"], hat["id"]])
    assert f'<a href="{browser.files}?folder={outer}" title="/Products">/Products</a>' in listed.text
    assert 'id="upload-form"' not in listed.text
    both = browser.http.get(browser.files, params={"meta": "sku=9", "q": "hat"}).text
    assert re.findall(r'<tr id="asset-(ast_\w+)"', both) == [hat["id"]]
    assert (
        "No file has the metadata “sku=11”."
        in browser.http.get(browser.files, params={"meta": "sku=11"}).text
    )
    for bad in ("sku", "bad key=1", "k=" + "v" * 300):
        refused = browser.http.get(browser.files, params={"meta": bad})
        assert refused.status_code == 400, bad


def test_the_grid_shows_an_images_placeholder_under_its_thumbnail(browser: Browser, stack: Any) -> None:
    image = browser.upload_xhr(b"\x89PNG not really", "photo.png")
    asset = image.json()["asset"]
    # The image facts are blob's to compute (tested there and in test_describe.py): set here.
    with stack.metadata_engine.begin() as conn:
        conn.execute(
            text("UPDATE assets SET placeholder = :p, mime_type = 'image/png' WHERE id = :a"),
            {"p": "LEHV6nWB2yk8pyo0adR*.7kCMdnj", "a": asset["id"]},
        )
    chosen = browser.post(f"{browser.files}/view", {"view": "grid", "back": browser.files})
    assert chosen.status_code == 303
    # A Secure cookie, which httpx keeps to https: sent by hand, as the session's is.
    view = chosen.headers["set-cookie"].split(";", 1)[0]
    grid = browser.http.get(
        browser.files, headers={"cookie": f"{browser.http.headers['cookie']}; {view}"}
    ).text
    found = re.search(
        r'<img class="placeholder" src="(data:image/png;base64,[^"]+)" alt="" aria-hidden="true">'
        r'\s*<img class="thumb"',
        grid,
    )
    assert found, grid[grid.find('id="asset-grid"') :][:1500]
    assert found.group(1) == placeholders.data_url("LEHV6nWB2yk8pyo0adR*.7kCMdnj", 8, 6)
    assert "style=" not in grid  # no inline style (the CSP's style-src 'self'): an <img> of its own
