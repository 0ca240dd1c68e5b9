"""A page on another origin uploads a file with a token its server minted (issue 14, CONTRACT §8).

The page's HTML and script and the server's ``mint_upload_token`` are the two snippets of
docs/upload-from-a-browser.md, run as they stand there: the server is a stdlib HTTP server on
``localhost`` (another origin than the stack's ``127.0.0.1``) that holds an organization key;
chromium opens its page, picks a file, and posts it straight to Coffer with the token.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.e2e

DOC = Path(__file__).resolve().parents[2] / "docs" / "upload-from-a-browser.md"
WIDTH, HEIGHT = 700, 500  # about 1 MiB of PNG: the upload takes more than one progress event


def doc_snippet(language: str) -> str:
    """The first fenced ``language`` block of the doc."""
    found = re.search(rf"^```{language}\n(.*?)^```$", DOC.read_text(), re.DOTALL | re.MULTILINE)
    assert found, f"{DOC.name} has no {language} block"
    return found.group(1)


def png(width: int, height: int, seed: bytes) -> bytes:
    """A valid RGB PNG of incompressible pixels (stdlib only)."""
    rows = b""
    pixels = hashlib.shake_256(seed).digest(width * height * 3)
    for y in range(height):
        rows += b"\x00" + pixels[y * width * 3 : (y + 1) * width * 3]

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    body = chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + body


class CustomerSite:
    """The customer's own web server: serves the doc's page, mints tokens with the doc's code."""

    def __init__(self, mint: Any, folder_id: str) -> None:
        page = (
            "<!doctype html><html><head><meta charset='utf-8'><title>Upload</title></head><body>"
            + doc_snippet("html")
            + "</body></html>"
        ).encode()
        self.minted: list[dict[str, Any]] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.answer(200, "text/html; charset=utf-8", page)

            def do_POST(self) -> None:
                if self.path != "/upload-token":
                    self.answer(404, "text/plain", b"not found")
                    return
                token = mint(folder_id)
                site.minted.append(token)
                self.answer(200, "application/json", json.dumps(token).encode())

            def answer(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://localhost:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> CustomerSite:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def org(dashboard: Any) -> tuple[Any, str]:
    """An organization made through the dashboard, and an organization key for its server."""
    page, _who, org_id = dashboard.signup_with_org("site-owner", "Site")
    key = dashboard.create_key(page, org_id, name="website")
    page.close()
    return dashboard, key


def test_a_page_on_another_origin_uploads_with_a_token_from_its_server(
    org: tuple[Any, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dash, key = org
    api = dash.api(key)
    folder = api.post("/folders", json={"name": "from the website"})
    assert folder.status_code == 201, folder.text
    folder_id = folder.json()["id"]

    # The server side: the doc's snippet, with its settings from the environment as it reads them.
    monkeypatch.setenv("COFFER_URL", dash.stack.edge_url)
    monkeypatch.setenv("COFFER_API_KEY", key)
    server_code: dict[str, Any] = {}
    exec(compile(doc_snippet("python"), str(DOC), "exec"), server_code)  # the doc's own code

    picture = png(WIDTH, HEIGHT, tmp_path.name.encode())
    chosen = tmp_path / "sunset.png"
    chosen.write_bytes(picture)

    with CustomerSite(server_code["mint_upload_token"], folder_id) as site:
        assert not site.url.startswith(dash.stack.edge_url)
        page = dash.page()
        to_coffer: list[dict[str, str]] = []
        page.on(
            "request",
            lambda r: to_coffer.append(r.headers) if r.url.startswith(dash.stack.edge_url) else None,
        )
        page.goto(site.url)
        assert key not in page.content()

        page.set_input_files("#file", str(chosen))

        page.wait_for_function("document.getElementById('progress').value === 1")
        result = page.locator("#result")
        page.wait_for_function("document.getElementById('result').textContent !== ''")
        stored = re.fullmatch(r"Stored sunset\.png \((ast_[0-9A-Z]{26})\)", result.inner_text())
        assert stored, result.inner_text()
        asset_id = stored.group(1)
        # The file appears in the page: the preview loads it from Coffer's CDN.
        page.wait_for_function(
            f"(() => {{ const i = document.getElementById('preview');"
            f" return i.complete && i.naturalWidth === {WIDTH} && i.naturalHeight === {HEIGHT}; }})()"
        )

        # The browser sent no key to Coffer, only the token its server minted.
        assert to_coffer, "the page sent nothing to Coffer"
        assert all("x-api-key" not in headers for headers in to_coffer)
        assert len(site.minted) == 1
        spent = site.minted[0]["url"]
        assert spent.startswith(dash.stack.edge_url + "/api/uploads?token=cof_upl_")

        # A second upload with the same token is refused, in an answer the page can read.
        second = page.evaluate(
            """async (url) => {
                const form = new FormData();
                form.append("file", new Blob(["again"], { type: "image/png" }), "again.png");
                const answer = await fetch(url, { method: "POST", body: form });
                return { status: answer.status, body: await answer.json() };
            }""",
            spent,
        )
    assert second["status"] == 401, second
    assert second["body"]["error"]["code"] == "unauthorized"

    # Through the API: the asset is in the token's folder, with the bytes the page picked.
    listing = api.get("/assets", params={"folderId": folder_id})
    assert listing.status_code == 200, listing.text
    assets = listing.json()["assets"]
    assert [a["id"] for a in assets] == [asset_id]
    asset = assets[0]
    assert asset["name"] == "sunset.png"
    assert asset["size"] == len(picture)
    assert asset["mimeType"] == "image/png"
    assert asset["sha256"] == hashlib.sha256(picture).hexdigest()
    downloaded = httpx.get(asset["publicUrl"], timeout=30)
    assert downloaded.status_code == 200
    assert hashlib.sha256(downloaded.content).hexdigest() == asset["sha256"]
