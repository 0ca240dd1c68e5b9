"""Dashboard, API keys in a real browser (DASHBOARD.md §10, scenarios 1-4, 13, 14)."""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

ORG_KEY = re.compile(r"^cof_org_[0-9A-Za-z]{32}$")
USER_KEY = re.compile(r"^cof_usr_[0-9A-Za-z]{32}$")


def test_key_lifecycle(dashboard_stack: Any, dashboard_for: Any, until: Any) -> None:
    # On the embedded default only: the dashboard's key routes are tested in process on both
    # databases (services/edge/tests/api/test_keys.py); the browser adds the page.
    dash = dashboard_for(dashboard_stack)
    ctx = dash.context()
    ctx.grant_permissions(["clipboard-read", "clipboard-write"])
    page = ctx.new_page()
    who = dash.person("owner")
    dash.register(page, who)
    org_id = dash.create_org(page, "Acme")

    page.goto(f"/dashboard/o/{org_id}/keys")
    page.select_option("#kind", "organization")
    page.fill("#name", "ci")
    page.select_option("#expiry", "30d")
    with page.expect_response(lambda r: r.request.method == "POST" and r.url.endswith("/keys")) as answer:
        page.click("#create button[type=submit]")
    assert answer.value.status == 201
    assert answer.value.headers["cache-control"] == "no-store"
    key = page.input_value("#new-key")
    assert ORG_KEY.match(key), key
    assert "Copy this key now. Coffer stores only its hash and cannot show it again." in page.inner_text(
        "main"
    )
    assert f"export COFFER_API_KEY={key}" in page.inner_text("#curl")
    assert "x-organization-id" not in page.inner_text("#curl")  # an organization key needs none

    page.click("button[data-copy=new-key]")
    assert page.evaluate("navigator.clipboard.readText()") == key

    # Once only: not after leaving, not on Back, not on a revisit, nor in any other page's HTML.
    page.click("text=I have saved it")
    page.wait_for_url(f"**/dashboard/o/{org_id}/keys")
    assert key not in page.content()
    row = page.locator("tr", has_text="ci").first
    assert key[:12] in row.inner_text()
    assert "Never used" in row.inner_text()
    page.go_back()
    assert key not in page.content()
    for path in ("", "/keys", "/members", "/usage", "/audit", "/settings"):
        page.goto(f"/dashboard/o/{org_id}{path}")
        assert key not in page.content(), path
    page.goto("/dashboard/account")
    assert key not in page.content()

    with dash.api(key) as api:
        assert api.get("/folders").status_code == 200
        # last_used_at has a 60 s resolution in auth, and its first use is always written.
        page.goto(f"/dashboard/o/{org_id}/keys")
        assert "Never used" not in page.locator("tr", has_text="ci").first.inner_text()

        page.locator("tr", has_text="ci").first.locator("text=Delete").click()
        assert "Requests with this key fail within 5 seconds" in page.inner_text("main")
        page.click("button.danger")
        page.wait_for_url("**/keys?deleted=1")
        until(lambda: api.get("/folders").status_code == 401, timeout=5.5)
    assert page.locator("tr", has_text="ci").count() == 0


def test_rotate_with_and_without_grace(dashboard: Any, until: Any) -> None:
    page, _, org_id = dashboard.signup_with_org()
    old_now = dashboard.create_key(page, org_id, name="alpha")
    old_later = dashboard.create_key(page, org_id, name="beta")

    def rotate(name: str, grace: str) -> str:
        page.goto(f"/dashboard/o/{org_id}/keys")
        page.locator("tr", has_text=name).first.locator("text=Rotate").click()
        page.select_option("#grace", grace)
        page.click("main button[type=submit]")
        page.wait_for_selector("#new-key")
        return str(page.input_value("#new-key"))

    new_now = rotate("alpha", "0")
    with dashboard.api(new_now) as api:
        assert api.get("/folders").status_code == 200
    with dashboard.api(old_now) as api:
        until(lambda: api.get("/folders").status_code == 401, timeout=5.5)

    new_later = rotate("beta", "3600")
    assert "keeps working until" in page.inner_text("main")
    with dashboard.api(new_later) as api:
        assert api.get("/folders").status_code == 200
    with dashboard.api(old_later) as api:
        assert api.get("/folders").status_code == 200
    page.goto(f"/dashboard/o/{org_id}/keys")
    rows = [r for r in page.locator("tr", has_text="beta").all_inner_texts() if old_later[:12] in r]
    assert rows and "Expires in 1 h" in rows[0], rows


def test_expired_key(dashboard: Any, until: Any) -> None:
    """A key made with a 3-second expiry (a test setting) expires in the API and on the page."""
    page, _, org_id = dashboard.signup_with_org()
    key = dashboard.create_key(page, org_id, name="short", expiry="3s")
    with dashboard.api(key) as api:

        def expired() -> bool:
            answer = api.get("/folders")
            return (
                answer.status_code == 401 and answer.json()["error"]["message"] == "The API key has expired."
            )

        until(expired, timeout=10)
    page.goto(f"/dashboard/o/{org_id}/keys")
    assert "Expired" in page.locator("tr", has_text="short").first.inner_text()


def test_personal_key_of_a_user_in_two_orgs(dashboard: Any) -> None:
    page, _, org_a = dashboard.signup_with_org(org="Org A")
    org_b = dashboard.create_org(page, "Org B")
    b_org_key = dashboard.create_key(page, org_b, name="b-only")
    key = dashboard.create_key(page, org_a, kind="user", name="mine")
    assert USER_KEY.match(key), key
    assert f'-H "x-organization-id: {org_a}"' in page.inner_text("#curl")
    with dashboard.api(key) as api:
        answer = api.get("/folders")
        assert answer.status_code == 400
        assert answer.json()["error"]["code"] == "organization_required"
        for org in (org_a, org_b):
            assert api.get("/folders", headers={"x-organization-id": org}).status_code == 200
    page.goto(f"/dashboard/o/{org_a}/keys")
    assert "b-only" not in page.content() and b_org_key[:12] not in page.content()
    assert "mine" in page.content()


def test_minting_a_key_asks_for_the_password_outside_the_sudo_window(
    tmp_path_factory: pytest.TempPathFactory, running_stack_factory: Any, dashboard_for: Any
) -> None:
    env = {"COFFER_DASHBOARD_IP_LIMIT": "1000/minute"}
    with running_stack_factory(tmp_path_factory.mktemp("sudo"), **env) as s:
        dash = dashboard_for(s)
        page, who, org_id = dash.signup_with_org()
        # Time passes: the password entry moves 2 h into the past, the end of the default window
        # (auth's own tests check the window's edges; this one checks what the page does).
        with closing(sqlite3.connect(s.data_dir / "auth.db")) as db, db:
            aged = db.execute("UPDATE sessions SET authenticated_at = datetime(authenticated_at, '-2 hours')")
            assert aged.rowcount == 1
        page.goto(f"/dashboard/o/{org_id}/keys")
        page.fill("#name", "after-sudo")
        page.click("#create button[type=submit]")
        page.wait_for_selector("#reauth-password")
        assert "Confirm your password" in page.inner_text("main")
        page.fill("#reauth-password", "not the password")
        page.click("main button[type=submit]")
        assert "Wrong password." in page.inner_text("main")
        page.fill("#reauth-password", who.password)
        page.click("main button[type=submit]")
        page.wait_for_selector("#new-key")
        key = page.input_value("#new-key")
        with dash.api(key) as api:
            assert api.get("/folders").status_code == 200
        page.goto(f"/dashboard/o/{org_id}/keys")
        assert "after-sudo" in page.content()

        # Issue 23: inviting an owner (who could then mint keys and remove the others) asks too;
        # inviting a member does not.
        with closing(sqlite3.connect(s.data_dir / "auth.db")) as db, db:
            db.execute("UPDATE sessions SET authenticated_at = datetime(authenticated_at, '-3 hours')")
        page.goto(f"/dashboard/o/{org_id}/members")
        page.fill("#invite-email", "plain-member@example.com")
        page.select_option("#invite-role", "member")
        page.click("form[action$='/invitations'] button[type=submit]")
        page.wait_for_selector("#invite-link")
        page.goto(f"/dashboard/o/{org_id}/members")
        page.fill("#invite-email", "new-owner@example.com")
        page.select_option("#invite-role", "owner")
        page.click("form[action$='/invitations'] button[type=submit]")
        page.wait_for_selector("#reauth-password")
        assert "Confirm your password" in page.inner_text("main")
        page.fill("#reauth-password", who.password)
        page.click("main button[type=submit]")
        page.wait_for_selector("#invite-link")
        assert "/dashboard/invite/" in page.input_value("#invite-link")


def test_everything_works_without_javascript(dashboard: Any, until: Any) -> None:
    page = dashboard.page(java_script_enabled=False)
    who = dashboard.person("nojs")
    dashboard.register(page, who)
    page.click("text=Sign out")
    page.wait_for_url("**/dashboard/login")
    dashboard.login(page, who)
    page.wait_for_url("**/dashboard/orgs/new")
    org_id = dashboard.create_org(page, "No JS")
    key = dashboard.create_key(page, org_id, name="plain")
    assert ORG_KEY.match(key)
    assert page.locator("button[data-copy]").first.is_hidden()  # copy needs JS; select-all is there
    with dashboard.api(key) as api:
        assert api.get("/folders").status_code == 200
        page.goto(f"/dashboard/o/{org_id}/keys")
        page.locator("tr", has_text="plain").first.locator("text=Delete").click()
        page.click("button.danger")
        page.wait_for_url("**/keys?deleted=1")
        until(lambda: api.get("/folders").status_code == 401, timeout=5.5)
    page.goto(f"/dashboard/o/{org_id}/members")
    page.fill("#invite-email", "friend@example.com")
    page.click("form[action$='/invitations'] button[type=submit]")
    link = page.input_value("#invite-link")
    assert link.startswith(dashboard.stack.edge_url + "/dashboard/invite/")
