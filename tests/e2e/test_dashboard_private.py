"""Private files in the dashboard, in a real browser (CONTRACT §12): the visibility column,
the switch on the file page (the CDN refuses the bare key within 5 s, and serves it again
after the switch back; the preview keeps working through its signed URL), and the
organization's default in Settings."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from coffer_testkit.testing import png_bytes

pytestmark = pytest.mark.e2e

SWITCH_SECONDS = 5.0  # CONTRACT §12


def test_the_visibility_switch_and_the_default(dashboard: Any, until: Any) -> None:
    page, _, org_id = dashboard.signup_with_org(org="Private Ltd")
    api = dashboard.api(dashboard.create_key(page, org_id, name="private-test"))
    data = png_bytes()
    asset = api.post("/assets", files={"file": ("chart.png", data, "image/png")}).json()
    url = asset["publicUrl"]
    assert httpx.get(url).status_code == 200

    page.goto(f"/dashboard/o/{org_id}/files")
    row = page.locator("#assets tbody tr", has_text="chart.png")
    assert row.locator("td.visibility").inner_text() == "Public"
    row.locator("td.name a").click()
    assert page.inner_text("#asset-visibility") == "Public"
    assert page.input_value("#public-url") == url
    page.click("#make-private")
    assert "The file is private" in page.inner_text("main")
    assert page.inner_text("#asset-visibility") == "Private"
    expect(page.locator("#private-note")).to_be_visible()
    expect(page.locator("#public-url")).to_have_count(0)
    until(lambda: httpx.get(url).status_code == 404, timeout=SWITCH_SECONDS)
    assert api.get(f"/assets/{asset['id']}").json()["publicUrl"] is None
    # The preview comes from a signed URL: it still shows.
    page.wait_for_function(
        "() => { const i = document.querySelector('#preview-image');"
        " return i && i.complete && i.naturalWidth > 0; }"
    )
    page.goto(f"/dashboard/o/{org_id}/files")
    assert row.locator("td.visibility").inner_text() == "Private"

    row.locator("td.name a").click()
    page.click("#make-public")
    assert "The file is public" in page.inner_text("main")
    assert page.input_value("#public-url") == url
    until(lambda: httpx.get(url).status_code == 200, timeout=SWITCH_SECONDS)

    page.goto(f"/dashboard/o/{org_id}/settings")
    page.check("#default-visibility input[value=private]")
    page.click("#save-default-visibility")
    assert "New uploads are now private" in page.inner_text("main")
    assert page.is_checked("#default-visibility input[value=private]")

    def uploaded_private() -> bool:
        made = api.post("/assets", files={"file": ("later.txt", b"later")}).json()
        return bool(made["visibility"] == "private")

    until(uploaded_private, timeout=SWITCH_SECONDS)  # edge's auth cache: at most 5 s
