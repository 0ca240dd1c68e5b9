"""Dashboard, the audit log in a real browser (DASHBOARD.md §10, scenario 15; the file-browser
events of scenario 7 come with the file browser)."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e


def test_audit_log_filters_and_exports(dashboard: Any) -> None:
    page, owner, org_id = dashboard.signup_with_org(org="Audited")
    dashboard.create_key(page, org_id, name="audited-key")
    page.goto(f"/dashboard/o/{org_id}/keys")
    page.locator("tr", has_text="audited-key").locator("text=Delete").click()
    page.click("button.danger")
    page.wait_for_url("**/keys?deleted=1")
    member = dashboard.person("member")
    page.goto(f"/dashboard/o/{org_id}/members")
    page.fill("#invite-email", member.email)
    page.click("form[action$='/invitations'] button[type=submit]")
    link = page.input_value("#invite-link")
    member_page = dashboard.page()
    member_page.goto(link)
    member_page.click("text=Create account")
    member_page.fill("#password", member.password)
    member_page.click("main button[type=submit]")
    member_page.wait_for_url("**/dashboard/invite/*")
    member_page.click("text=Accept and join")
    member_page.wait_for_url(f"**/dashboard/o/{org_id}")

    page.goto(f"/dashboard/o/{org_id}/audit")
    rows = page.locator("#audit-rows tr").all_inner_texts()
    actions = page.locator("#audit-rows tr td:nth-child(3)").all_inner_texts()
    for action in ("org.created", "key.created", "key.deleted", "member.invited", "invitation.accepted"):
        assert action in actions, actions
    key_row = next(r for r in rows if "key.created" in r)
    assert owner.email in key_row and "127.0.0.1" in key_row and "req_" in key_row
    assert member.email in next(r for r in rows if "invitation.accepted" in r)

    # htmx asks for the same URL and gets only the rows block (jinja2-fragments).
    fragment = page.request.get(f"/dashboard/o/{org_id}/audit", headers={"HX-Request": "true"})
    assert fragment.status == 200 and "HX-Request" in fragment.headers["vary"]
    body = fragment.text().strip()
    assert body.startswith("<tr") and "<html" not in body and "key.created" in body

    # Filter by an action prefix.
    page.fill("#f-action", "key.")
    page.click("text=Filter")
    page.wait_for_url(re.compile(r"/audit\?(.*&)?action=key\.(&|$)"))
    filtered = page.locator("#audit-rows tr").all_inner_texts()
    assert len(filtered) == 2 and all("key." in r for r in filtered), filtered

    # The exports hold the same rows as the page (with the filter applied).
    with page.expect_download() as download:
        page.click("text=Export CSV")
    exported = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text(encoding="utf-8"))))
    assert sorted(r["action"] for r in exported) == ["key.created", "key.deleted"]
    assert all(r["actorLabel"] == owner.email and r["requestId"].startswith("req_") for r in exported)
    answer = page.request.get(f"/dashboard/o/{org_id}/audit/export.jsonl")
    assert answer.status == 200
    lines = [json.loads(line) for line in answer.text().splitlines()]
    assert {e["action"] for e in lines} >= {
        "org.created",
        "key.created",
        "key.deleted",
        "invitation.accepted",
    }
    assert len(lines) == len(rows)

    # Members do not read it: no nav entry, 403 when asked.
    assert member_page.locator("nav.side a", has_text="Audit").count() == 0
    response = member_page.goto(f"/dashboard/o/{org_id}/audit")
    assert response.status == 403
    assert member_page.request.get(f"/dashboard/o/{org_id}/audit/export.csv").status == 403
