# ruff: noqa: ARG005 (each action takes the ids, which some do not use)
"""The dashboard's Webhooks page, in process (the four real apps, both databases): who may do
what (the authorization matrix of its actions), the secret shown once, a re-posted form, the
refusals with their messages, pause and resume, rotation, delete, and the audit events.
What needs a dispatcher and a real receiver (a delivery in the log, Redeliver) and a browser
is in tests/e2e/test_dashboard_webhooks.py."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from coffer_kit.contract.ids import new_id
from coffer_kit.contract.webhooks import EVENT_TYPES, MAX_ENDPOINTS
from coffer_testkit.dashboard import SAME_ORIGIN, Browser, audit_once, sign_up

from .test_dashboard_files import metadata_calls

# A name under .invalid never resolves (RFC 6761): metadata accepts it (it checks again at
# each connection), and nothing is ever sent here: the in-process stack runs no dispatcher.
RECEIVER = "https://receiver.invalid/coffer-hook"
SECRET = re.compile(r"whsec_[A-Za-z0-9+/=]{20,}")


@pytest.fixture
def browser(stack: Any) -> Iterator[Browser]:
    b = sign_up(stack.edge_url, "Hooks")
    yield b
    b.http.close()


def base(b: Browser) -> str:
    return f"/dashboard/o/{b.org_id}/webhooks"


def add(b: Browser, url: str = RECEIVER, **form: Any) -> httpx.Response:
    data: dict[str, Any] = {"url": url, "events": list(EVENT_TYPES), "form_id": new_id("f"), **form}
    return b.http.post(base(b), data={"csrf_token": b.csrf, **data})


def endpoint_id(page: str) -> str:
    found = re.search(r"/webhooks/(whk_[0-9A-Za-z]+)\"", page)
    assert found, page[:3000]
    return found.group(1)


def test_the_secret_is_shown_once_and_a_resent_form_makes_nothing(browser: Browser) -> None:
    form_id = new_id("f")
    made = add(browser, description="thumbnails worker", form_id=form_id)
    assert made.status_code == 201, made.text
    assert made.headers["cache-control"] == "no-store"
    (secret,) = set(SECRET.findall(made.text))
    hook = endpoint_id(made.text)
    page = browser.http.get(f"{base(browser)}/{hook}").text
    listing = browser.http.get(base(browser)).text
    for shown in (page, listing):
        assert secret not in shown and "whsec_" not in shown
    assert RECEIVER in listing and "thumbnails worker" in listing
    again = add(browser, description="thumbnails worker", form_id=form_id)
    assert again.status_code == 409 and "sent already" in again.text
    assert "whsec_" not in again.text
    assert browser.http.get(base(browser)).text.count(f'/webhooks/{hook}"') == 1
    assert listing.count('href="/dashboard/o/') >= 1 and len(re.findall(r"/webhooks/whk_", listing)) == 1


def test_refusals_say_why_and_change_nothing(browser: Browser) -> None:
    for url, status, message in (
        ("", 400, "Enter the URL"),
        ("http://receiver.invalid/hook", 400, "https"),
        ("https://127.0.0.1/hook", 400, ""),
        ("https://10.1.2.3/hook", 400, ""),
        ("https://[::1]/hook", 400, ""),
        ("https://169.254.169.254/latest", 400, ""),
        ("https://" + "a" * 2100 + ".example/", 400, "longer than"),
    ):
        answer = add(browser, url)
        assert answer.status_code == status, (url, answer.status_code, answer.text[:500])
        assert 'role="alert"' in answer.text and message in answer.text, url
        assert "whsec_" not in answer.text
    none = browser.http.post(base(browser), data={"csrf_token": browser.csrf, "url": RECEIVER})
    assert none.status_code == 400 and "at least one event" in none.text
    bogus = add(browser, events=["asset.exploded"])
    assert bogus.status_code == 400
    folder = add(browser, folder="fld_" + "0" * 26)
    assert folder.status_code == 404 and "does not exist" in folder.text
    assert add(browser, folder="../etc").status_code == 400
    assert "No endpoints yet." in browser.http.get(base(browser)).text


def test_another_orgs_folder_as_the_filter_reads_as_one_that_does_not_exist(
    browser: Browser, stack: Any
) -> None:
    """Another organization's folder id in the folder field gets the answer a made-up one gets
    (metadata's 403 "belongs to another organization" was an existence oracle)."""
    stranger = sign_up(stack.edge_url, "Elsewhere")
    try:
        made = stranger.post(f"/dashboard/o/{stranger.org_id}/files/folders", {"name": "Theirs"})
        assert made.status_code == 303, made.text
        theirs = made.headers["location"].rsplit("=", 1)[1]
    finally:
        stranger.http.close()
    for folder in (theirs, new_id("fld")):
        answer = add(browser, folder=folder)
        assert answer.status_code == 404, (folder, answer.status_code)
        assert "That folder does not exist any more." in answer.text
        assert "another organization" not in answer.text
    assert "No endpoints yet." in browser.http.get(base(browser)).text


def _metadata_webhook_calls() -> float:
    return metadata_calls("/internal/v1/orgs/{org_id}/webhooks")


def test_an_id_with_a_line_break_after_it_is_refused_before_metadata(browser: Browser) -> None:
    """An endpoint or delivery id is checked whole (``fullmatch``): "whk_…\\n" passed the check
    ("$" also matches before a final line break) and went on to metadata."""
    hook = endpoint_id(add(browser).text)
    delivery = new_id("whd")
    for tail in ("%0A", "%0a"):
        before = _metadata_webhook_calls()
        answers = [
            browser.http.get(f"{base(browser)}/{hook}{tail}"),
            browser.http.get(f"{base(browser)}/{hook}{tail}/delete"),
            browser.post(f"{base(browser)}/{hook}{tail}/test"),
            browser.post(f"{base(browser)}/{hook}{tail}/disable"),
            browser.post(f"{base(browser)}/{hook}/deliveries/{delivery}{tail}/redeliver"),
            browser.post(f"{base(browser)}/{hook}{tail}/delete"),
        ]
        assert [a.status_code for a in answers] == [404] * len(answers), [a.status_code for a in answers]
        assert _metadata_webhook_calls() == before, "a malformed id reached metadata"
    assert 'class="badge ok">enabled' in browser.http.get(f"{base(browser)}/{hook}").text


def test_at_most_ten_endpoints(browser: Browser) -> None:
    for _ in range(MAX_ENDPOINTS):
        assert add(browser).status_code == 201
    page = browser.http.get(base(browser)).text
    assert f"at most {MAX_ENDPOINTS} endpoints" in page and 'name="url"' not in page
    refused = add(browser)
    assert refused.status_code == 409, refused.text[:500]


def test_folder_filter_pause_resume_rotate_and_delete_are_audited(browser: Browser) -> None:
    made_folder = browser.post(f"/dashboard/o/{browser.org_id}/files/folders", {"name": "Photos"})
    assert made_folder.status_code == 303, made_folder.text
    folder = made_folder.headers["location"].rsplit("=", 1)[1]
    listing = browser.http.get(base(browser)).text
    assert f'<option value="{folder}">— Photos</option>' in listing
    made = add(browser, events=["asset.created"], folder=folder)
    assert made.status_code == 201, made.text
    hook = endpoint_id(made.text)
    page = f"{base(browser)}/{hook}"
    shown = browser.http.get(page).text
    assert "/Photos" in shown and "asset.created" in shown and "asset.deleted" not in shown

    paused = browser.post(f"{page}/disable")
    assert (paused.status_code, paused.headers["location"]) == (303, f"{page}?done=disabled")
    shown = browser.http.get(paused.headers["location"]).text
    assert "Deliveries paused" in shown and "Paused by an owner" in shown
    assert f'action="{page}/enable"' in shown
    resumed = browser.post(f"{page}/enable")
    assert resumed.status_code == 303
    assert 'class="badge ok">enabled' in browser.http.get(page).text

    first = SECRET.search(made.text)
    rotated = browser.post(f"{page}/rotate")
    assert rotated.status_code == 200 and rotated.headers["cache-control"] == "no-store"
    second = SECRET.search(rotated.text)
    assert first and second and first.group(0) != second.group(0)
    assert "previous secret still signs" in rotated.text
    assert "Previous secret" in browser.http.get(page).text

    test = browser.post(f"{page}/test")
    assert (test.status_code, test.headers["location"]) == (303, f"{page}?done=test")

    confirm = browser.http.get(f"{page}/delete").text
    assert "cannot be undone" in confirm
    gone = browser.post(f"{page}/delete")
    assert gone.status_code == 303 and "deleted=1" in gone.headers["location"]
    assert browser.http.get(page).status_code == 404
    assert "No endpoints yet." in browser.http.get(base(browser)).text
    audit = audit_once(browser, lambda text: "webhook.deleted" in text)
    for action in (
        "webhook.created",
        "webhook.updated",
        "webhook.secret_rotated",
        "webhook.tested",
        "webhook.deleted",
    ):
        assert action in audit, action
    assert browser.email in audit


def test_a_member_sees_no_webhooks(browser: Browser, stack: Any, admin: Any) -> None:
    member = sign_up(stack.edge_url, "Theirs")
    try:
        admin("add-member", "--org", browser.org_id, "--user", member.email, "--role", "member")
        overview = member.http.get(f"/dashboard/o/{browser.org_id}").text
        assert "/webhooks" not in overview
        as_owner = browser.http.get(f"/dashboard/o/{browser.org_id}").text
        assert f"/dashboard/o/{browser.org_id}/webhooks" in as_owner
    finally:
        member.http.close()


# The authorization matrix of the page's actions --------------------------------------------


@dataclass(frozen=True)
class Action:
    name: str
    call: Callable[[Browser | httpx.Client, str, str, str], httpx.Response]
    ok: int  # what the owner gets


def _post(who: Browser | httpx.Client, path: str, data: dict[str, Any] | None = None) -> httpx.Response:
    if isinstance(who, Browser):
        return who.post(path, data)
    return who.post(path, data={"csrf_token": "none", **(data or {})})


def _get(who: Browser | httpx.Client, path: str) -> httpx.Response:
    return (who.http if isinstance(who, Browser) else who).get(path)


ACTIONS = [
    Action("GET list", lambda w, org, hook, did: _get(w, f"/dashboard/o/{org}/webhooks"), 200),
    Action(
        "POST add",
        lambda w, org, hook, did: _post(
            w, f"/dashboard/o/{org}/webhooks", {"url": RECEIVER, "events": "asset.created"}
        ),
        201,
    ),
    Action("GET endpoint", lambda w, org, hook, did: _get(w, f"/dashboard/o/{org}/webhooks/{hook}"), 200),
    Action("POST test", lambda w, org, hook, did: _post(w, f"/dashboard/o/{org}/webhooks/{hook}/test"), 303),
    Action(
        "POST disable", lambda w, org, hook, did: _post(w, f"/dashboard/o/{org}/webhooks/{hook}/disable"), 303
    ),
    Action(
        "POST enable", lambda w, org, hook, did: _post(w, f"/dashboard/o/{org}/webhooks/{hook}/enable"), 303
    ),
    Action(
        "POST rotate", lambda w, org, hook, did: _post(w, f"/dashboard/o/{org}/webhooks/{hook}/rotate"), 200
    ),
    Action(
        "GET delete", lambda w, org, hook, did: _get(w, f"/dashboard/o/{org}/webhooks/{hook}/delete"), 200
    ),
    # No dispatcher runs here, so no delivery exists: the owner's well-formed id is a 404.
    Action(
        "POST redeliver",
        lambda w, org, hook, did: _post(w, f"/dashboard/o/{org}/webhooks/{hook}/deliveries/{did}/redeliver"),
        404,
    ),
    Action(
        "POST delete", lambda w, org, hook, did: _post(w, f"/dashboard/o/{org}/webhooks/{hook}/delete"), 303
    ),
]


@pytest.fixture
def people(stack: Any, admin: Any, browser: Browser) -> Iterator[dict[str, Browser | httpx.Client]]:
    """Callers of organization A (browser's): its owner, a member, a user who owns B and is a
    member of A, an owner of B alone, and nobody signed in."""
    member = sign_up(stack.edge_url, "Member's own")
    both = sign_up(stack.edge_url, "B")
    outsider = sign_up(stack.edge_url, "C")
    admin("add-member", "--org", browser.org_id, "--user", member.email, "--role", "member")
    admin("add-member", "--org", browser.org_id, "--user", both.email, "--role", "member")
    anonymous = httpx.Client(base_url=stack.edge_url, headers=SAME_ORIGIN, timeout=30)
    yield {
        "owner": browser,
        "member": member,
        "member of A who owns B": both,
        "owner of another organization": outsider,
        "anonymous": anonymous,
    }
    for b in (member, both, outsider):
        b.http.close()
    anonymous.close()


# What each caller gets on A's webhook pages: the owner as the action says; a member 403 (the
# page is the owners'); a user who is no member of A 404 (no existence oracle); nobody signed
# in goes to the sign-in page.
EXPECTED = {
    "member": 403,
    "member of A who owns B": 403,
    "owner of another organization": 404,
    "anonymous": 303,
}


@pytest.mark.parametrize("caller", ["owner", *EXPECTED])
def test_every_webhook_action_answers_every_caller_as_the_matrix_says(
    people: dict[str, Browser | httpx.Client], caller: str
) -> None:
    owner = people["owner"]
    assert isinstance(owner, Browser)
    wrong: list[str] = []
    for action in ACTIONS:
        made = add(owner)
        assert made.status_code == 201, made.text
        hook = endpoint_id(made.text)
        answer = action.call(people[caller], owner.org_id, hook, new_id("whd"))
        expected = action.ok if caller == "owner" else EXPECTED[caller]
        if answer.status_code != expected:
            wrong.append(f"{action.name}: {answer.status_code}, expected {expected}")
        elif caller == "anonymous" and "/dashboard/login" not in answer.headers["location"]:
            wrong.append(f"{action.name}: redirected to {answer.headers['location']}")
        elif expected in (403, 404) and "whsec_" in answer.text:
            wrong.append(f"{action.name}: a refusal showed a secret")
        owner.post(f"{base(owner)}/{hook}/delete")  # at most 10 endpoints: keep room
    assert not wrong, "\n".join(wrong)


def test_another_organizations_endpoint_is_not_found_from_ones_own(
    people: dict[str, Browser | httpx.Client],
) -> None:
    """The owner of B, in B's pages, naming A's endpoint: 404 for every action, A's endpoint unchanged."""
    owner, other = people["owner"], people["member of A who owns B"]
    assert isinstance(owner, Browser) and isinstance(other, Browser)
    hook = endpoint_id(add(owner).text)
    for action in ACTIONS:
        if action.name in ("GET list", "POST add"):
            continue
        answer = action.call(other, other.org_id, hook, new_id("whd"))
        assert answer.status_code == 404, (action.name, answer.status_code)
    assert 'class="badge ok">enabled' in owner.http.get(f"{base(owner)}/{hook}").text


def test_a_secret_is_shown_only_after_the_password_outside_the_reauth_window(
    browser: Browser, stack: Any
) -> None:
    """As for keys: a signing secret is a credential, so adding an endpoint or rotating its
    secret asks for the password when it was last entered longer ago than the window."""
    hook = endpoint_id(add(browser).text)
    engine = create_engine(stack.auth_database_url)
    try:
        aged = (
            "datetime(authenticated_at, '-3 hours')"
            if engine.dialect.name == "sqlite"
            else "authenticated_at - interval '3 hours'"
        )
        with engine.begin() as db:  # time passes: the password was entered 3 h ago
            assert db.execute(text(f"UPDATE sessions SET authenticated_at = {aged}")).rowcount == 1
    finally:
        engine.dispose()
    rotate = f"{base(browser)}/{hook}/rotate"

    def asks() -> httpx.Response | None:
        # edge keeps a session's answer up to 1 s here: until then the old window still holds
        # (and the rotation just happens, shown once like any).
        answer = browser.post(rotate)
        return answer if answer.status_code == 403 else None

    deadline = time.monotonic() + 10
    while (asked := asks()) is None:
        assert time.monotonic() < deadline, "the password was never asked again"
    assert "Confirm your password" in asked.text and "whsec_" not in asked.text
    wrong = browser.post(rotate, {"reauth_password": "not the password"})
    assert wrong.status_code == 400 and "Wrong password." in wrong.text and "whsec_" not in wrong.text
    new = add(browser, reauth_password="pw-wrong")
    assert new.status_code == 400 and "whsec_" not in new.text
    assert browser.http.get(base(browser)).text.count("/webhooks/whk_") == 1, "nothing was added"
