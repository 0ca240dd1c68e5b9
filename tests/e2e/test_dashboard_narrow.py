"""The dashboard on a phone (390 px) and a tablet (768 px): no page scrolls sideways, and the top
bar and the organization's menu stay on the screen. A table wider than the screen scrolls inside
its own box."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.e2e

LONG_NAME = "a photo with a rather long name from the summer holiday of 2024, uncropped.jpg"


@pytest.mark.parametrize("width", [390, 768])
def test_every_page_fits_a_narrow_screen(dashboard: Any, width: int) -> None:
    page, _, org_id = dashboard.signup_with_org(
        "narrow", "An Organization With A Rather Long Name", viewport={"width": width, "height": 844}
    )
    key = dashboard.create_key(page, org_id, name="ci")
    with httpx.Client(base_url=dashboard.stack.edge_url + "/api", headers={"x-api-key": key}) as api:
        answer = api.post("/assets", files={"file": (LONG_NAME, b"x" * 2048, "image/jpeg")})
        assert answer.status_code == 201, answer.text
        asset_id = answer.json()["id"]
    base = f"/dashboard/o/{org_id}"
    paths = [base, f"{base}/files", f"{base}/files/{asset_id}", f"{base}/keys", f"{base}/members"]
    paths += [f"{base}/usage", f"{base}/audit", f"{base}/settings", f"{base}/webhooks"]
    paths += ["/dashboard/account", "/dashboard/orgs"]
    for path in paths:
        answer = page.goto(path)
        assert answer is not None and answer.status == 200, path
        page_width = page.evaluate("document.documentElement.scrollWidth")
        assert page_width <= width, f"{path} is {page_width} px wide on a {width} px screen"
        on_screen = [page.locator("header.topbar button", has_text="Sign out"), page.locator("header .brand")]
        if path.startswith(base):
            on_screen += [
                page.locator("nav.side a", has_text=label) for label in ("Overview", "Files", "Settings")
            ]
        for element in on_screen:
            box = element.bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, (path, box)
    # The files table is wider than a phone: it scrolls in its own box, the name cut short.
    page.goto(f"{base}/files")
    assert page.locator("#assets td.name", has_text="a photo with").is_visible()
    storage = page.inner_text("main")
    assert "2,048 bytes in 1 file" in storage and "1 files" not in storage
    if out := os.environ.get("COFFER_SCREENSHOTS_DIR"):  # docs/dashboard.md, "Narrow screens"
        page.screenshot(path=str(Path(out) / f"files-{width}px.png"), full_page=True)
