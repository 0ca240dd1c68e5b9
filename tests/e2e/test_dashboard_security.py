"""Dashboard security in a real browser (DASHBOARD.md §10, scenarios 10-12 and 16): the session
cookie, both CSRF layers, sessions ending, throttling, headers, bad input, outages, clean logs."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from coffer_testkit.testing import png_bytes

pytestmark = pytest.mark.e2e

CROSS_ORIGIN = "This request did not come from the dashboard. Reload and try again."
SECRET = re.compile(r"cof_(?:org|usr|ses)_[0-9A-Za-z_-]{16,}")


@pytest.fixture
def attacker() -> Iterator[Any]:
    """Serves one HTML page from another origin: http://localhost:<port>, not 127.0.0.1."""
    pages: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, b"")
            self.send_response(200 if body else 404)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def publish(path: str, html: str) -> str:
        pages[path] = html.encode()
        return f"http://localhost:{server.server_address[1]}{path}"

    yield publish
    server.shutdown()


def _key_names(page: Any, org_id: str) -> str:
    page.goto(f"/dashboard/o/{org_id}/keys")
    return str(page.inner_text("main"))


def test_session_cookie_attributes(dashboard: Any) -> None:
    page, _, _ = dashboard.signup_with_org()
    cookies = {c["name"]: c for c in page.context.cookies()}
    cookie = cookies["__Host-coffer_session"]
    assert cookie["value"].startswith("cof_ses_")
    assert cookie["httpOnly"] is True and cookie["secure"] is True
    assert cookie["sameSite"] == "Lax" and cookie["path"] == "/"
    assert cookie["domain"] == "127.0.0.1"  # host-only: no Domain attribute was sent
    assert "coffer_session" not in page.evaluate("document.cookie")


def test_a_page_from_another_origin_cannot_create_a_key(dashboard: Any, attacker: Any) -> None:
    page, _, org_id = dashboard.signup_with_org()
    page.goto(f"/dashboard/o/{org_id}/keys")
    csrf = page.input_value("input[name=csrf_token]")
    # The page even carries the right CSRF token: the origin check alone must refuse it.
    url = attacker(
        "/attack.html",
        f"""<!doctype html><form id=f method=post action="{dashboard.url}/o/{org_id}/keys">
        <input name=kind value=organization><input name=name value=evil-key>
        <input name=expiry value=never><input name=csrf_token value="{csrf}"></form>
        <script>document.getElementById('f').submit()</script>""",
    )
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.goto(url)
    assert answer.value.status == 403
    page.wait_for_load_state()
    assert CROSS_ORIGIN in page.inner_text("body")
    assert "evil-key" not in _key_names(page, org_id)


def test_a_wrong_csrf_token_is_refused(dashboard: Any) -> None:
    page, _, org_id = dashboard.signup_with_org()
    page.goto(f"/dashboard/o/{org_id}/keys")
    page.fill("#name", "forged")
    page.eval_on_selector("#create input[name=csrf_token]", "el => el.value = 'wrong-token'")
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.click("#create button[type=submit]")
    assert answer.value.status == 403
    assert CROSS_ORIGIN in page.inner_text("main")
    assert "forged" not in _key_names(page, org_id)


def test_sign_out_and_sessions_ending(dashboard: Any, until: Any) -> None:
    page, who, org_id = dashboard.signup_with_org()
    first = page.context.cookies()[0]["value"]
    # A new cookie value at every sign-in (no fixation), and the old one stops working.
    dashboard.login(page, who)
    second = page.context.cookies()[0]["value"]
    assert second != first
    with httpx.Client(base_url=dashboard.stack.edge_url) as plain:
        old = plain.get(f"/dashboard/o/{org_id}", headers={"cookie": f"__Host-coffer_session={first}"})
        assert old.status_code == 303 and "/dashboard/login" in old.headers["location"]

    # Sign out: Back and reload show the sign-in page, not the org.
    page.goto(f"/dashboard/o/{org_id}")
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.click("text=Sign out")
    assert answer.value.all_headers()["clear-site-data"] == '"cache", "storage"'
    page.wait_for_url("**/dashboard/login")
    page.go_back()
    page.wait_for_url("**/dashboard/login**")
    page.reload()
    assert "/dashboard/login" in page.url

    # Revoked from another browser: that one lands on the sign-in page within 5 s.
    a = dashboard.page()
    dashboard.login(a, who)
    b = dashboard.page()
    dashboard.login(b, who)
    a.goto("/dashboard/account")
    a.locator("tr", has_text="Sign out").locator("text=Sign out").first.click()
    a.wait_for_url("**/account?done=session")
    until(lambda: "/dashboard/login" in b.goto(f"/dashboard/o/{org_id}").url, timeout=5.5)

    # A password change with "sign out my other sessions" (checked by default) ends the others.
    c = dashboard.page()
    dashboard.login(c, who)
    a.goto("/dashboard/account")
    assert a.is_checked("input[name=revoke_others]")

    def session_cookie() -> str:
        return next(c["value"] for c in a.context.cookies() if c["name"] == "__Host-coffer_session")

    before = session_cookie()
    a.fill("#current-password", who.password)
    a.fill("#new-password", who.password + "-changed")
    a.click("form[action$='/password'] button[type=submit]")
    a.wait_for_url("**/account?done=password")
    until(lambda: "/dashboard/login" in c.goto(f"/dashboard/o/{org_id}").url, timeout=5.5)
    a.goto(f"/dashboard/o/{org_id}")
    assert a.url.endswith(org_id)  # the one that changed it stays signed in,
    assert session_cookie() != before  # on a new session: the change re-authenticated


def test_login_throttling_and_no_enumeration(dashboard: Any) -> None:
    page, who, _ = dashboard.signup_with_org()
    page.context.clear_cookies()
    unknown = dashboard.person("nobody")
    dashboard.login(page, unknown)
    unknown_message = page.inner_text(".alert")
    dashboard.login(page, type(who)(who.email, "wrong password 1"))
    assert page.inner_text(".alert") == unknown_message == "Wrong email or password."
    statuses = []
    for n in range(2, 8):
        with page.expect_response(lambda r: r.request.method == "POST") as answer:
            dashboard.login(page, type(who)(who.email, f"wrong password {n}"))
        statuses.append(answer.value.status)
    assert statuses[-1] == 429, statuses
    assert int(answer.value.headers["retry-after"]) > 0
    assert re.search(r"Too many attempts\. Try again in \d+ s\.", page.inner_text(".alert"))


def test_bad_input_shows_a_message_and_changes_nothing(dashboard: Any) -> None:
    page, _, org_id = dashboard.signup_with_org(org="Tidy")
    page.goto("/dashboard/orgs/new")
    page.eval_on_selector("#name", "el => { el.removeAttribute('required'); el.value = '   '; }")
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.click("main button[type=submit]")
    assert answer.value.status == 400
    expect(page.locator(".alert.error")).to_have_count(1)
    page.goto("/dashboard/orgs")
    assert page.locator("tbody tr").count() == 1

    page.goto(f"/dashboard/o/{org_id}/keys")
    page.fill("#name", "past")
    page.select_option("#expiry", "date")
    page.fill("#expiry-date", "2001-01-01")
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.click("#create button[type=submit]")
    assert answer.value.status == 400
    assert "The expiry date must be in the future." in page.inner_text(".alert.error")
    assert "past" not in page.locator("table").first.inner_text()

    page.goto(f"/dashboard/o/{org_id}/members")
    page.eval_on_selector("#invite-email", "el => el.type = 'text'")
    page.fill("#invite-email", "not an email")
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.click("form[action$='/invitations'] button[type=submit]")
    assert answer.value.status == 400
    expect(page.locator(".alert.error")).to_have_count(1)
    assert page.locator("table").nth(1).locator("tbody tr").inner_text().strip() == "No invitations."


def test_headers_and_no_console_errors_on_every_page(dashboard: Any) -> None:
    page, _, org_id = dashboard.signup_with_org()
    dashboard.create_key(page, org_id, name="seen")
    answers: list[Any] = []
    problems: list[str] = []
    page.on("response", lambda r: answers.append(r) if "/dashboard" in r.url else None)
    page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    for path in ("", "/files", "/keys", "/members", "/usage", "/audit", "/settings", "/webhooks"):
        page.goto(f"/dashboard/o/{org_id}{path}")
    # The file browser's asset page, with an image preview from the CDN origin (img-src).
    with dashboard.api(dashboard.create_key(page, org_id, name="files")) as api:
        asset = api.post("/assets", files={"file": ("dot.png", png_bytes(), "image/png")}).json()
    page.goto(f"/dashboard/o/{org_id}/files/{asset['id']}")
    page.wait_for_function("() => document.getElementById('preview-image')?.naturalWidth > 0")
    for path in ("/dashboard/account", "/dashboard/orgs", "/dashboard/orgs/new"):
        page.goto(path)
    dashboard.create_key(page, org_id, name="again")
    assert problems == []
    pages = [a for a in answers if "/static/" not in a.url]
    assert len(pages) >= 10
    for answer in pages:
        headers = answer.headers
        csp = headers["content-security-policy"]
        assert "default-src 'self'; script-src 'self'; style-src 'self'" in csp
        assert f"img-src 'self' {dashboard.stack.public_cdn_url}" in csp
        assert "frame-ancestors 'none'" in csp and "form-action 'self'" in csp
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["cache-control"] == "no-store", answer.url
    static = [a for a in answers if "/static/" in a.url]
    assert static and all("immutable" in a.headers["cache-control"] for a in static)


def test_outages_and_the_ip_throttle(
    tmp_path_factory: pytest.TempPathFactory, running_stack_factory: Any, dashboard_for: Any, until: Any
) -> None:
    """On a stack of its own: the per-IP limit of 20 posts a minute, the per-key limit on the
    file browser's uploads, then auth, then metadata down -> the 503 page."""
    root = tmp_path_factory.mktemp("dash-outage")
    with running_stack_factory(
        root, COFFER_SWEEP_INTERVAL_SECONDS="0", COFFER_EDGE_RATE_LIMIT="3/minute"
    ) as s:
        dash = dashboard_for(s)
        page, _, org_id = dash.signup_with_org()
        # A session is no way around the API's limit: its uploads count against the same
        # budget, per user. Four files, three at a time: the fourth is refused, and says why.
        files = []
        for n in range(4):
            (root / f"u{n}.txt").write_bytes(b"x" * 100)
            files.append(str(root / f"u{n}.txt"))
        page.goto(f"/dashboard/o/{org_id}/files")
        page.set_input_files("#file-input", files)
        page.wait_for_function(
            "() => document.querySelectorAll('#uploads li.done, #uploads li.failed').length >= 4"
        )
        texts = page.locator("#uploads .status").all_inner_texts()
        refused = [t for t in texts if not t.startswith("Uploaded")]
        assert len(texts) == 4 and len(refused) == 1, texts
        assert re.fullmatch(r"Too many uploads at once\. Try again in \d+ s\.", refused[0]), texts
        with httpx.Client(base_url=s.edge_url, headers={"sec-fetch-site": "same-origin"}) as plain:
            statuses = [
                plain.post(
                    "/dashboard/login", data={"email": f"x{n}@example.com", "password": "x" * 10}
                ).status_code
                for n in range(21)
            ]
        assert statuses.count(429) >= 1 and statuses[-1] == 429, statuses
        s.kill("auth")
        # The session answer is cached up to 5 s; after that every page is the 503 page.
        until(lambda: page.goto(f"/dashboard/o/{org_id}/keys").status == 503, timeout=10)
        answer = page.goto(f"/dashboard/o/{org_id}")
        assert answer.status == 503 and answer.headers["retry-after"]
        text = page.inner_text("main")
        assert "Coffer is temporarily unavailable" in text and "Traceback" not in page.content()
        s.start("auth")
        until(lambda: page.goto(f"/dashboard/o/{org_id}").status == 200, timeout=20)
        # metadata down: the pages that show usage answer the 503 page too.
        s.kill("metadata")
        for path in ("/usage", "/files"):
            answer = page.goto(f"/dashboard/o/{org_id}{path}")
            assert answer.status == 503 and "Coffer is temporarily unavailable" in page.inner_text("main")
        assert page.goto(f"/dashboard/o/{org_id}/members").status == 200  # auth alone is enough there


def test_service_logs_hold_no_secrets(dashboard: Any) -> None:
    """Run last in this module: everything the dashboard tests did so far is in these logs."""
    page, _, org_id = dashboard.signup_with_org()
    key = dashboard.create_key(page, org_id, kind="user", name="logged?")
    page.goto(f"/dashboard/o/{org_id}/members")
    page.fill("#invite-email", "secret-check@example.com")
    page.click("form[action$='/invitations'] button[type=submit]")
    invite_token = page.input_value("#invite-link").rsplit("/", 1)[-1]
    session = page.context.cookies()[0]["value"]
    assert dashboard.stack.log_dir is not None
    for log in sorted(dashboard.stack.log_dir.glob("*.log")):
        # Local mode only: auth logs the links it would have mailed (DASHBOARD.md §5, event
        # mail_not_sent); no other line may hold a token. Production mode never logs them.
        lines = log.read_text(errors="replace").splitlines()
        text = "\n".join(line for line in lines if '"event": "mail_not_sent"' not in line)
        for secret in (key, invite_token, session):
            assert secret not in text, log.name
        assert not SECRET.search(text), (log.name, SECRET.search(text))
