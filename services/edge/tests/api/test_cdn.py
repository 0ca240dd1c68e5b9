"""The CDN host (docs/contract.md §6): public and signed downloads of uploaded assets, in process."""

from __future__ import annotations

import hashlib
import time
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

from coffer_testkit.testing import TLS, assert_error, pattern_bytes

DATA = pattern_bytes(10_000)


def put(
    tenant, data: bytes = DATA, filename: str = "data.bin", content_type: str = "application/octet-stream"
):
    response = tenant.api.post("/api/assets", files={"file": (filename, data, content_type)})
    assert response.status_code == 201, response.text
    return response.json()


def sign(tenant, asset, expires_in: int = 3600) -> str:
    return tenant.api.get(f"/api/assets/{asset['id']}/url", params={"expiresIn": expires_in}).json()["url"]


def test_public_download_headers(tenant) -> None:
    asset = put(tenant, filename="résumé final.pdf", content_type="application/pdf")
    response = httpx.get(asset["publicUrl"], verify=TLS)
    assert response.status_code == 200
    assert response.content == DATA
    # What the upload decided (type, name, digest) reaches the CDN's headers; the full header
    # set of a download is blob's own test (services/blob/tests/test_cdn.py).
    h = response.headers
    assert (h["content-type"], h["content-length"]) == ("application/pdf", str(len(DATA)))
    assert h["etag"] == f'"{hashlib.sha256(DATA).hexdigest()}"'
    assert h["content-disposition"] == "inline; filename*=UTF-8''r%C3%A9sum%C3%A9%20final.pdf"
    assert h["cache-control"] == "public, max-age=31536000, immutable"


def test_head(tenant) -> None:
    asset = put(tenant)
    response = httpx.head(asset["publicUrl"], verify=TLS)
    assert response.status_code == 200
    assert response.headers["content-length"] == str(len(DATA))
    assert response.content == b""


@pytest.mark.parametrize(
    ("header", "start", "end"),
    [
        ("bytes=0-99", 0, 99),
        ("bytes=9990-", 9990, 9999),
        ("bytes=-10", 9990, 9999),
        ("bytes=5000-99999", 5000, 9999),
    ],
)
def test_single_range(tenant, header, start, end) -> None:
    asset = put(tenant)
    response = httpx.get(asset["publicUrl"], headers={"range": header}, verify=TLS)
    assert response.status_code == 206
    assert response.content == DATA[start : end + 1]
    assert response.headers["content-range"] == f"bytes {start}-{end}/{len(DATA)}"
    assert response.headers["content-length"] == str(end - start + 1)


def test_unsatisfiable_range_is_416(tenant) -> None:
    asset = put(tenant)
    response = httpx.get(asset["publicUrl"], headers={"range": "bytes=20000-"}, verify=TLS)
    assert response.status_code == 416
    assert response.headers["content-range"] == f"bytes */{len(DATA)}"


def test_if_none_match_is_304(tenant) -> None:
    asset = put(tenant)
    etag = httpx.get(asset["publicUrl"], verify=TLS).headers["etag"]
    response = httpx.get(asset["publicUrl"], headers={"if-none-match": etag}, verify=TLS)
    assert response.status_code == 304 and response.content == b""
    assert response.headers["etag"] == etag
    assert httpx.get(asset["publicUrl"], headers={"if-none-match": '"other"'}, verify=TLS).status_code == 200


@pytest.mark.parametrize(
    ("filename", "content_type"),
    [
        ("page.html", "text/html"),
        ("logo.svg", "image/svg+xml"),
        ("app.js", "text/javascript"),
        ("feed.xml", "application/xml"),
    ],
)
def test_active_content_is_sandboxed(tenant, filename, content_type) -> None:
    asset = put(tenant, b"<script>alert(1)</script>", filename, content_type)
    response = httpx.get(asset["publicUrl"], verify=TLS)
    assert response.headers["content-security-policy"] == "sandbox"
    assert response.headers["x-content-type-options"] == "nosniff"


def test_signed_download(tenant) -> None:
    asset = put(tenant)
    url = sign(tenant, asset, 120)
    response = httpx.get(url, verify=TLS)
    assert response.status_code == 200 and response.content == DATA
    cache = response.headers["cache-control"]
    assert cache.startswith("private")
    max_age = int(cache.split("max-age=")[1].split(",")[0])
    assert 100 <= max_age <= 120


def test_expired_signature_is_403(tenant) -> None:
    asset = put(tenant)
    url = sign(tenant, asset, 1)
    expires = int(parse_qs(urlsplit(url).query)["expires"][0])
    while (response := httpx.get(url, verify=TLS)).status_code == 200:
        assert time.time() < expires + 1, "a signed URL was served after it expired"
        time.sleep(0.05)
    assert_error(response, 403, "forbidden")


def test_tampered_signatures_are_403(tenant) -> None:
    asset = put(tenant)
    other = put(tenant)
    url = sign(tenant, asset, 600)
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    base = f"{parts.scheme}://{parts.netloc}{parts.path}"
    longer = dict(query, expires=str(int(query["expires"]) + 1000))
    flipped = dict(query, signature=("A" if query["signature"][0] != "A" else "B") + query["signature"][1:])
    for bad in (longer, flipped, {"expires": query["expires"]}, {"signature": query["signature"]}):
        assert_error(httpx.get(f"{base}?{urlencode(bad)}", verify=TLS), 403, "forbidden")
    # A valid signature for one key does not open another.
    other_base = other["publicUrl"]
    assert_error(httpx.get(f"{other_base}?{urlencode(query)}", verify=TLS), 403, "forbidden")


def test_unknown_keys_are_404(stack, tenant) -> None:
    asset = put(tenant)
    cdn = stack.public_cdn_url
    for path in (
        "/nothing",
        f"/{tenant.org_id}/ast_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9/x.bin",
        "/" + asset["key"] + "x",
        "/" + asset["key"].rsplit("/", 1)[0] + "/",
    ):
        assert_error(httpx.get(cdn + path, verify=TLS), 404, "not_found")
