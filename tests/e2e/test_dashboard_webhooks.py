"""The dashboard's Webhooks page in a real browser against real deliveries (issue 25): an owner
adds an endpoint pointing at a receiver in this test, sees its secret once, sends a test, sees
the delivery in the log, redelivers it, pauses and resumes the endpoint. Every request the
receiver gets is verified with the ``standardwebhooks`` library against the raw bytes.

The operator allows http and allowlists 127.0.0.0/8 here, for the receiver. PNGs go to
``$COFFER_SCREENSHOTS_DIR`` when set (else the test's temporary directory).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Error as PlaywrightError

from coffer_testkit.webhooks import LOOPBACK_ENV, Receiver, webhook_receiver

pytestmark = pytest.mark.e2e

WEBHOOK_ENV = {
    "COFFER_DASHBOARD_IP_LIMIT": "10000/minute",
    **LOOPBACK_ENV,
}
SECRET = re.compile(r"^whsec_[A-Za-z0-9+/]+=*$")
HOOK = "/coffer-hook"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A receiver at ``/coffer-hook`` answering 200 with a JSON body (the log shows it)."""
    with webhook_receiver() as state:
        state.answers[HOOK] = lambda _got: (200, b'{"received": true, "by": "the test receiver"}')
        state.url += HOOK
        yield state


def settled_content(page: Any) -> str | None:
    """The page's HTML, or None while it is still navigating (after a refused Back)."""
    try:
        return str(page.content())
    except PlaywrightError:
        return None


@pytest.fixture(scope="module")
def webhook_stack(running_stack_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with running_stack_factory(tmp_path_factory.mktemp("dash-webhooks"), **WEBHOOK_ENV) as s:
        yield s


def test_an_owner_adds_an_endpoint_tests_it_and_redelivers(
    webhook_stack: Any, dashboard_for: Any, receiver: Receiver, tmp_path: Path, until: Any
) -> None:
    shots = Path(os.environ.get("COFFER_SCREENSHOTS_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    dash = dashboard_for(webhook_stack)
    page, _owner, org_id = dash.signup_with_org("hooks", "Hooks Inc", viewport={"width": 1280, "height": 900})
    key = dash.create_key(page, org_id, name="uploader")
    api = dash.api(key)

    page.goto(f"/dashboard/o/{org_id}")
    page.click("nav.side >> text=Webhooks")
    page.wait_for_url(f"**/dashboard/o/{org_id}/webhooks")
    assert "No endpoints yet." in page.inner_text("main")
    page.fill("#wh-url", receiver.url)
    page.fill("#wh-description", "Thumbnail worker")
    page.screenshot(path=str(shots / "webhooks-add.png"), full_page=True)
    with page.expect_response(lambda r: r.request.method == "POST" and r.url.endswith("/webhooks")) as made:
        page.click("#add button[type=submit]")
    assert made.value.status == 201
    assert made.value.headers["cache-control"] == "no-store"
    secret = page.input_value("#wh-secret")
    assert SECRET.match(secret), secret
    assert "shown only once" in page.inner_text("main")
    page.screenshot(path=str(shots / "webhooks-secret.png"), full_page=True)

    # Once only: gone after "I have saved it", on Back, and from every other page.
    page.click("text=I have saved it")
    page.wait_for_url(re.compile(r".*/webhooks/whk_[0-9A-Za-z]+$"))
    endpoint_url = page.url
    assert secret not in page.content()
    # Back to the no-store answer of the POST: Chromium either refuses (a cache miss: it will
    # not re-post a form by itself) or shows the page the pagehide handler emptied.
    refused = ""
    try:
        page.go_back()
    except PlaywrightError as exc:
        refused = str(exc)
    assert not refused or "ERR_CACHE_MISS" in refused, refused
    assert secret not in until(lambda: settled_content(page))
    page.goto(endpoint_url)
    assert "Thumbnail worker" in page.inner_text("h1")
    assert "No deliveries yet." in page.inner_text("#log-rows")

    # Send test: a ping arrives, signed with the secret the page showed, and enters the log.
    page.click("button:text('Send test')")
    page.wait_for_url("**?done=test")
    assert "A ping event was queued" in page.inner_text("main")
    first = receiver.wait(HOOK, 1)[0]
    ping = first.verified(secret)
    assert ping["type"] == "ping" and ping["organizationId"] == org_id
    assert first.id == ping["id"]

    def logged(text: str, count: int = 1) -> bool:
        page.goto(endpoint_url)
        return page.locator("#log-rows tr", has_text=text).count() >= count

    until(lambda: logged("ping"))
    row = page.locator("#log-rows tr", has_text="ping").first
    assert "succeeded" in row.inner_text() and "200" in row.inner_text()
    assert ping["id"] in row.inner_text()
    assert re.search(r"\d+ ms", row.inner_text())
    row.locator("summary").click()
    assert "the test receiver" in row.locator("pre.answer").inner_text()

    # A real event: an upload through the API reaches the receiver and the log.
    asset = api.post("/assets", files={"file": ("cat.png", b"\x89PNG not really", "image/png")})
    assert asset.status_code == 201, asset.text
    created = receiver.wait(HOOK, 2)[1].verified(secret)
    assert created["type"] == "asset.created" and created["data"]["asset"]["id"] == asset.json()["id"]
    until(lambda: logged("asset.created"))
    page.screenshot(path=str(shots / "webhooks-log.png"), full_page=True)

    # Redeliver the ping: the same event (the same webhook-id) arrives again, and is logged.
    page.locator("#log-rows tr", has_text="ping").first.locator("button:text('Redeliver')").click()
    page.wait_for_url("**?done=redelivered")
    assert "same webhook-id" in page.inner_text("main")
    again = receiver.wait(HOOK, 3)[2]
    assert again.verified(secret)["id"] == ping["id"]
    assert again.id == first.id
    until(lambda: logged("ping", count=2))
    page.locator("#log-rows summary").first.click()  # one answer open, as a reader would
    page.screenshot(path=str(shots / "webhooks-redelivered.png"), full_page=True)
    from axe_playwright_python.sync_playwright import Axe

    found = Axe().run(page).response["violations"]
    assert not found, [f"{v['impact']} {v['id']}: {v['help']}" for v in found]

    # Pause and resume: the page says so, and the list shows it.
    page.click("button:text('Disable')")
    page.wait_for_url("**?done=disabled")
    assert "Paused by an owner" in page.inner_text("main")
    page.goto(f"/dashboard/o/{org_id}/webhooks")
    assert "paused" in page.locator("tbody tr", has_text="Thumbnail worker").inner_text()
    page.screenshot(path=str(shots / "webhooks-list.png"), full_page=True)
    page.goto(endpoint_url)
    page.click("button:text('Enable')")
    page.wait_for_url("**?done=enabled")
    assert "Deliveries resumed." in page.inner_text("main")

    # The same API, for the record: the log the page showed is the API's.
    with httpx.Client(base_url=webhook_stack.edge_url, headers={"x-api-key": key}) as client:
        hook_id = endpoint_url.rsplit("/", 1)[1]
        log = client.get(f"/api/webhooks/{hook_id}/deliveries").json()
        assert {d["eventType"] for d in log["deliveries"]} == {"ping", "asset.created"}
        assert all(d["result"] == "succeeded" and d["responseStatus"] == 200 for d in log["deliveries"])
    api.close()


def test_a_member_gets_no_webhooks_page(webhook_stack: Any, dashboard_for: Any, admin_for: Any) -> None:
    dash = dashboard_for(webhook_stack)
    _owner_page, _owner, org_id = dash.signup_with_org("owner", "Members Inc")
    member_page = dash.page()
    member = dash.person("member")
    dash.register(member_page, member)
    admin_for(webhook_stack)("add-member", "--org", org_id, "--user", member.email, "--role", "member")
    member_page.goto(f"/dashboard/o/{org_id}")
    assert member_page.locator("nav.side >> text=Webhooks").count() == 0
    answer = member_page.goto(f"/dashboard/o/{org_id}/webhooks")
    assert answer is not None and answer.status == 403
    assert "Only owners can manage webhooks." in member_page.inner_text("main")


def test_without_javascript_an_endpoint_is_added_and_its_secret_shown(
    webhook_stack: Any, dashboard_for: Any, receiver: Receiver
) -> None:
    dash = dashboard_for(webhook_stack)
    page, _owner, org_id = dash.signup_with_org("nojs", "Plain Forms", java_script_enabled=False)
    page.goto(f"/dashboard/o/{org_id}/webhooks")
    page.fill("#wh-url", receiver.url)
    page.uncheck("input[value='folder.created']")
    page.click("#add button[type=submit]")
    page.wait_for_selector("#wh-secret")
    assert SECRET.match(page.input_value("#wh-secret"))
    assert not page.locator("button[data-copy=wh-secret]").is_visible(), "Copy needs JavaScript"
    page.click("text=I have saved it")
    page.wait_for_url("**/webhooks/whk_*")
    facts = page.inner_text("dl.facts")
    assert "folder.created" not in facts and "asset.created" in facts
    page.click("button:text('Disable')")
    page.wait_for_url("**?done=disabled")
    assert "Send test" not in page.inner_text("main"), "a paused endpoint offers no test"
    page.click("button:text('Enable')")
    page.wait_for_url("**?done=enabled")
