"""Dashboard, members and invitations in a real browser (DASHBOARD.md §10, scenarios 5 and 6)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.e2e

LAST_OWNER = "Make someone else owner first."


def _invite(page: Any, org_id: str, email: str, role: str = "member") -> str:
    page.goto(f"/dashboard/o/{org_id}/members")
    page.fill("#invite-email", email)
    page.select_option("#invite-role", role)
    page.click("form[action$='/invitations'] button[type=submit]")
    page.wait_for_selector("#invite-link")
    return str(page.input_value("#invite-link"))


def _join(dash: Any, link: str, who: Any) -> Any:
    """A fresh browser opens the link, creates the invited account and accepts."""
    page = dash.page()
    page.goto(link)
    page.click("text=Create account")
    assert page.input_value("#email") == who.email
    page.fill("#password", who.password)
    page.click("main button[type=submit]")
    page.wait_for_url("**/dashboard/invite/*")
    page.click("text=Accept and join")
    page.wait_for_url("**/dashboard/o/org_*")
    return page


def test_invite_join_and_remove(dashboard: Any, until: Any) -> None:
    owner_page, _, org_id = dashboard.signup_with_org(org="Team")
    bee = dashboard.person("bee")
    owner_page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    link = _invite(owner_page, org_id, bee.email)
    assert link.startswith(dashboard.url + "/invite/")
    owner_page.click("button[data-copy=invite-link]")
    assert owner_page.evaluate("navigator.clipboard.readText()") == link
    token = link.rsplit("/", 1)[-1]
    owner_page.click("text=Done")
    assert token not in owner_page.content()  # shown once: the list holds no link

    # Someone signed in with another email cannot take it.
    stranger_page, _, _ = dashboard.signup_with_org(name="stranger", org="Elsewhere")
    stranger_page.goto(link)
    assert f"This invitation is for {bee.email}" in stranger_page.inner_text("main")
    with stranger_page.expect_response(lambda r: r.request.method == "POST") as answer:
        stranger_page.click("text=Accept and join")
    assert answer.value.status == 409
    assert f"This invitation is for {bee.email}" in stranger_page.inner_text("main")

    bee_page = _join(dashboard, link, bee)
    assert bee_page.url.endswith(f"/dashboard/o/{org_id}")
    owner_page.goto(f"/dashboard/o/{org_id}/members")
    assert bee.email in owner_page.locator("table").first.inner_text()
    invitation_row = owner_page.locator("table").nth(1).locator("tr", has_text=bee.email)
    assert "accepted" in invitation_row.inner_text()

    # A used link, and a link replaced by "New link", answer the 410 page.
    bee_page.goto(link)
    assert "Ask an owner for a new link" in bee_page.inner_text("main")
    other = dashboard.person("other")
    first = _invite(owner_page, org_id, other.email)
    owner_page.goto(f"/dashboard/o/{org_id}/members")
    owner_page.locator("tr", has_text=other.email).locator("text=New link").click()
    second = owner_page.input_value("#invite-link")
    assert second != first
    response = stranger_page.goto(first)
    assert response.status == 410
    assert "Ask an owner for a new link" in stranger_page.inner_text("main")

    # Bee's personal key works in the org until the owner removes Bee.
    key = dashboard.create_key(bee_page, org_id, kind="user", name="bee-key")
    with dashboard.api(key, org_id) as api:
        assert api.get("/folders").status_code == 200
        owner_page.goto(f"/dashboard/o/{org_id}/members")
        owner_page.locator("tr", has_text=bee.email).locator("text=Remove").click()
        assert (
            "Their personal keys stop working for this organization within 5 seconds"
            in owner_page.inner_text("main")
        )
        owner_page.click("button.danger")
        owner_page.wait_for_url("**/members?done=removed")
        until(lambda: api.get("/folders").status_code == 403, timeout=5.5)
    until(lambda: bee_page.goto(f"/dashboard/o/{org_id}/keys").status == 404, timeout=5.5)


def test_last_owner_cannot_leave_or_step_down(dashboard: Any) -> None:
    page, me, org_id = dashboard.signup_with_org(org="Solo")

    def members_text() -> str:
        page.goto(f"/dashboard/o/{org_id}/members")
        return str(page.inner_text("main"))

    # Demote yourself.
    members_text()
    row = page.locator("tr", has_text=me.email)
    row.locator("select[name=role]").select_option("member")
    row.locator("text=Change role").click()
    assert LAST_OWNER in page.inner_text("main")
    # Leave.
    members_text()
    page.locator("tr", has_text=me.email).locator("text=Leave").click()
    assert LAST_OWNER in page.inner_text("main")
    # Nothing changed: still the one owner.
    assert "owner" in page.locator("tr", has_text=me.email).locator("select").input_value()

    # With a second owner, leaving works.
    bee = dashboard.person("bee")
    link = _invite(page, org_id, bee.email, role="owner")
    _join(dashboard, link, bee)
    members_text()
    page.locator("tr", has_text=me.email).locator("text=Leave").click()
    page.wait_for_url("**/dashboard/orgs")
    assert "Solo" not in page.inner_text("main")
