"""Image transforms in the dashboard (issue 26), in a real browser against the real stack: the
file browser's grid of thumbnails (the CDN's thumb preset; a signed one for a private file; a
type icon for the rest, and for an image the CDN cannot read), the view remembered across
reloads, and the asset page's medium preview and resized signed URL.

Screenshots go to ``$COFFER_SCREENSHOTS_DIR`` when set, else to the test's temporary directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import pyvips

pytestmark = pytest.mark.e2e


def jpeg(width: int, height: int) -> bytes:
    image = pyvips.Image.xyz(width, height).extract_band(0).cast("uchar")
    return bytes(image.bandjoin([image, image.invert()]).jpegsave_buffer(Q=85))


def png(width: int, height: int) -> bytes:
    image = pyvips.Image.xyz(width, height).extract_band(1).cast("uchar")
    return bytes(image.bandjoin([image.invert(), image]).pngsave_buffer())


def decoded(data: bytes) -> tuple[int, int, str]:
    image = pyvips.Image.new_from_buffer(data, "")
    loader = str(image.get("vips-loader")).removesuffix("_buffer").removesuffix("load")
    return image.width, image.height, loader


def get(url: str) -> httpx.Response:
    """A download by URL; a new variant's first request may wait for blob's worker processes
    (8.9 s measured at load 17), so more than httpx's default 5 s."""
    return httpx.get(url, timeout=30)


def shots_dir(tmp_path: Path) -> Path:
    out = Path(os.environ.get("COFFER_SCREENSHOTS_DIR") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out


def upload(api: httpx.Client, name: str, data: bytes, media_type: str, **fields: str) -> dict[str, Any]:
    answer = api.post("/assets", files={"file": (name, data, media_type)}, data=fields)
    assert answer.status_code == 201, answer.text
    return answer.json()  # type: ignore[no-any-return]


def tile(page: Any, asset_id: str) -> Any:
    return page.locator(f"#tile-{asset_id}")


def loaded_width(page: Any, selector: str) -> int:
    """Wait until the image has loaded (or failed), then its natural width (0: it failed)."""
    page.wait_for_function(
        "s => { const i = document.querySelector(s); return i && i.complete; }", arg=selector, timeout=30_000
    )
    return int(page.eval_on_selector(selector, "i => i.naturalWidth"))


def test_grid_of_thumbnails_remembered(dashboard: Any, tmp_path: Path, until: Any) -> None:
    ctx = dashboard.context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    answers: dict[str, httpx.Headers] = {}
    page.on("response", lambda r: answers.__setitem__(r.url, httpx.Headers(r.headers)))
    dashboard.register(page, dashboard.person("grid"))
    org_id = dashboard.create_org(page, "Harbour Photos")
    api = dashboard.api(dashboard.create_key(page, org_id, name="grid-test"))
    photo = upload(api, "harbour.jpg", jpeg(1600, 1200), "image/jpeg")
    secret = upload(api, "lighthouse.png", png(800, 600), "image/png", visibility="private")
    notes = upload(api, "notes.txt", b"Shot list\n", "text/plain")
    fake = upload(api, "not-really.png", b"this is text, not a PNG\n", "image/png")

    files = f"/dashboard/o/{org_id}/files"
    page.goto(files)
    assert page.locator("#assets").count() == 1 and page.locator("#asset-grid").count() == 0
    assert page.get_attribute("#view-table", "aria-pressed") == "true"
    page.click("#view-grid")
    page.wait_for_selector("#asset-grid")
    assert page.url.endswith(files)
    assert page.get_attribute("#view-grid", "aria-pressed") == "true"
    assert page.locator("#assets").count() == 0

    # Images: lazy, sized before they load, described, and at most 256 pixels wide as webp (the
    # thumbnail; an image whose BlurHash is computed also has its placeholder under it).
    cdn = dashboard.stack.public_cdn_url
    for asset in (photo, secret):
        img = tile(page, asset["id"]).locator("img.thumb")
        attrs = img.evaluate("i => [i.loading, i.getAttribute('width'), i.getAttribute('height'), i.alt]")
        assert attrs == ["lazy", "256", "256", f"Thumbnail of {asset['name']}"]
        src = img.get_attribute("src")
        assert src and src.startswith(cdn + "/") and "preset=thumb" in src
        width = loaded_width(page, f"#tile-{asset['id']} img.thumb")
        assert 0 < width <= 256
        until(lambda s=src: s in answers)
        assert answers[src]["content-type"] == "image/webp"
    photo_src = tile(page, photo["id"]).locator("img.thumb").get_attribute("src")
    assert photo_src == photo["publicUrl"] + "?preset=thumb"
    private_src = tile(page, secret["id"]).locator("img.thumb").get_attribute("src")
    assert "signature=" in private_src and "expires=" in private_src
    assert get(private_src.split("?", 1)[0] + "?preset=thumb").status_code == 404  # still private

    # Not an image: the type icon, no <img>; an "image" the CDN cannot read: the icon replaces it.
    assert tile(page, notes["id"]).locator("img").count() == 0
    assert tile(page, notes["id"]).locator(".file-icon").inner_text() == "TXT"
    assert loaded_width(page, f"#tile-{fake['id']} img.thumb") == 0
    until(lambda: tile(page, fake["id"]).locator(".file-icon").is_visible())
    assert not tile(page, fake["id"]).locator("img.thumb").is_visible()
    tile(page, photo["id"]).locator("a").click()
    page.wait_for_url(re.compile(rf".*/files/{photo['id']}$"))
    page.go_back()
    page.wait_for_selector("#asset-grid")
    page.screenshot(path=str(shots_dir(tmp_path) / "files-grid.png"), full_page=True)
    # On a phone the tiles shrink to two or three a row and the page never scrolls sideways.
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    columns = page.evaluate("getComputedStyle(document.getElementById('asset-grid')).gridTemplateColumns")
    assert len(columns.split()) >= 2, columns
    page.screenshot(path=str(shots_dir(tmp_path) / "files-grid-390px.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})

    # The choice survives a reload, another tab of the same browser, and an upload's refresh.
    page.reload()
    page.wait_for_selector("#asset-grid")
    other_tab = ctx.new_page()
    other_tab.goto(files)
    assert other_tab.locator("#asset-grid").count() == 1
    (tmp_path / "pier.png").write_bytes(png(300, 200))
    page.set_input_files("#file-input", str(tmp_path / "pier.png"))
    page.wait_for_function("() => document.querySelectorAll('#uploads li.done').length === 1")
    until(lambda: page.locator("#asset-grid .tile", has_text="pier.png").count() == 1)
    pier = page.locator("#asset-grid .tile", has_text="pier.png").get_attribute("id")
    assert 0 < loaded_width(page, f"#{pier} img") <= 256
    # A new browser (another person) starts with the table; going back to it is remembered too.
    stranger = dashboard.page()
    dashboard.register(stranger, dashboard.person("table"))
    stranger_org = dashboard.create_org(stranger, "Elsewhere")
    stranger.goto(f"/dashboard/o/{stranger_org}/files")
    assert stranger.locator("#assets").count() == 1
    page.click("#view-table")
    page.wait_for_selector("#assets")
    page.reload()
    assert page.locator("#assets").count() == 1 and page.locator("#asset-grid").count() == 0
    cookie = next(c for c in ctx.cookies() if "files_view" in c["name"])
    assert cookie["value"] == "table" and cookie["httpOnly"] and cookie["sameSite"] == "Lax"

    # The choice is a CSRF-checked form, and its way back stays in the organization's files.
    token = page.get_attribute("input[name=csrf_token]", "value")
    origin = {"origin": dashboard.stack.edge_url}
    refused = page.request.post(f"{files}/view", form={"view": "grid", "back": files}, headers=origin)
    assert refused.status == 403
    elsewhere = page.request.post(
        f"{files}/view",
        form={"csrf_token": token, "view": "grid", "back": "https://evil.example/"},
        headers=origin,
        max_redirects=0,
    )
    assert elsewhere.status == 303 and elsewhere.headers["location"] == files
    assert not problems, problems


def test_asset_page_preview_and_resized_url(dashboard: Any, tmp_path: Path) -> None:
    page = dashboard.page(viewport={"width": 1280, "height": 900})
    dashboard.register(page, dashboard.person("resize"))
    org_id = dashboard.create_org(page, "Resize Works")
    api = dashboard.api(dashboard.create_key(page, org_id, name="resize-test"))
    photo = upload(api, "harbour.jpg", jpeg(1600, 1200), "image/jpeg")
    notes = upload(api, "notes.txt", b"Shot list\n", "text/plain")
    base = f"/dashboard/o/{org_id}/files"

    # The preview is the CDN's medium preset (1280 wide) of a short signed URL.
    page.goto(f"{base}/{photo['id']}")
    src = page.get_attribute("#preview-image", "src")
    assert src and src.startswith(dashboard.stack.public_cdn_url + "/")
    assert "preset=medium" in src and "signature=" in src
    assert loaded_width(page, "#preview-image") == 1280
    assert page.get_attribute("#preview-image", "alt") == "harbour.jpg"

    # A resized signed URL: the size, fit and format asked for.
    page.fill("#tx-width", "300")
    page.fill("#tx-height", "200")
    page.select_option("#tx-fit", "cover")
    page.select_option("#tx-format", "png")
    page.select_option("#tx-expiry", "3600")
    page.click("#transformed button[type=submit]")
    page.wait_for_selector("#transformed-url")
    url = page.input_value("#transformed-url")
    got = get(url)
    assert got.status_code == 200 and got.headers["content-type"] == "image/png"
    assert decoded(got.content) == (300, 200, "png")
    assert "300 × 200" in page.inner_text("#transformed-summary")
    assert "in 1 h" in page.inner_text("#transformed-summary")
    assert loaded_width(page, "#transformed-preview") == 300
    # Its signature covers the transform.
    assert get(url.replace("w=300", "w=600")).status_code == 403
    # The plain signed URL is still there beside it, and still the original.
    page.click("#signed button[type=submit]")
    page.wait_for_selector("#signed-url")
    assert decoded(get(page.input_value("#signed-url")).content) == (1600, 1200, "jpeg")
    page.screenshot(path=str(shots_dir(tmp_path) / "asset-transforms.png"), full_page=True)

    # A width alone in webp.
    page.goto(f"{base}/{photo['id']}")
    page.fill("#tx-width", "500")
    page.select_option("#tx-format", "webp")
    page.click("#transformed button[type=submit]")
    page.wait_for_selector("#transformed-url")
    assert decoded(get(page.input_value("#transformed-url")).content) == (500, 375, "webp")

    # Refusals, straight to the route (the form's own min/max would stop a person first).
    token = page.get_attribute("input[name=csrf_token]", "value")
    origin = {"origin": dashboard.stack.edge_url}

    def post(asset_id: str, **fields: str) -> Any:
        form = {"csrf_token": token, "expiry": "3600", **fields}
        return page.request.post(f"{base}/{asset_id}/transformed-url", form=form, headers=origin)

    for fields, message in (
        ({"w": "5000"}, "w must be an integer from 1 to 4096"),
        ({"w": "abc"}, "w must be an integer from 1 to 4096"),
        ({"q": "5", "w": "10"}, "q must be an integer from 20 to 100"),
        ({"fit": "stretch", "w": "10"}, "fit must be one of"),
        ({}, "Give a width, a height or a format"),
    ):
        answer = post(photo["id"], **fields)
        assert answer.status == 400, (fields, answer.status)
        assert message in answer.text(), (fields, answer.text()[:200])
        assert 'id="transformed-url"' not in answer.text()
    answer = post(notes["id"], w="100")
    assert answer.status == 400 and "cannot be resized" in answer.text()
    assert post(photo["id"], w="100", csrf_token="wrong").status == 403
    # A text file's page offers no resized URL; another organization's file is not found.
    page.goto(f"{base}/{notes['id']}")
    assert page.locator("#transformed").count() == 0
    stranger = dashboard.page()
    dashboard.register(stranger, dashboard.person("stranger"))
    stranger_org = dashboard.create_org(stranger, "Elsewhere")
    stranger_token = stranger.get_attribute("input[name=csrf_token]", "value")
    answer = stranger.request.post(
        f"/dashboard/o/{stranger_org}/files/{photo['id']}/transformed-url",
        form={"csrf_token": stranger_token, "w": "100", "expiry": "3600"},
        headers=origin,
    )
    assert answer.status == 404
