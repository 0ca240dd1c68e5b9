"""The CDN listener (docs/contract.md §6): public and signed downloads, ranges, conditionals, headers."""

from __future__ import annotations

import hashlib
import time
from email.utils import format_datetime, parsedate_to_datetime
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import httpx
import pytest

from coffer_blob import cdn as cdn_module
from coffer_blob import signing
from coffer_blob.config import Settings
from coffer_testkit.testing import assert_error

from .support import ORG, SECRET, new_asset_id, upload

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["fs", "s3"])
def settings(request: pytest.FixtureRequest) -> Settings:
    """Every CDN test runs on both drivers."""
    return request.getfixturevalue("settings" if request.param == "fs" else "s3_settings")  # type: ignore[no-any-return]


DATA = bytes(range(256)) * 40  # 10,240 bytes
SIZE = len(DATA)


async def put(api: httpx.AsyncClient, data: bytes = DATA, **kwargs: Any) -> dict[str, Any]:
    response = await upload(api, data, **kwargs)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def key_path(key: str) -> str:
    """The CDN path of a key: each segment percent-encoded, as in publicUrl."""
    return "/" + "/".join(quote(segment, safe="") for segment in key.split("/"))


async def public_path(api: httpx.AsyncClient, **kwargs: Any) -> str:
    return key_path((await put(api, **kwargs))["key"])


async def signed_path(api: httpx.AsyncClient, key: str, expires_in: int = 600) -> str:
    response = await api.post("/internal/v1/sign", json={"key": key, "expiresIn": expires_in})
    return path_of(response.json()["url"])


async def test_public_download(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    path = await public_path(api, filename="résumé final.pdf", content_type="application/pdf")
    response = await cdn.get(path)
    assert response.status_code == 200
    assert response.content == DATA
    h = response.headers
    assert h["content-type"] == "application/pdf"
    assert h["content-length"] == str(SIZE)
    assert h["etag"] == f'"{hashlib.sha256(DATA).hexdigest()}"'
    assert parsedate_to_datetime(h["last-modified"]).year >= 2024
    assert h["accept-ranges"] == "bytes"
    assert h["content-disposition"] == "inline; filename*=UTF-8''r%C3%A9sum%C3%A9%20final.pdf"
    assert h["x-content-type-options"] == "nosniff"
    assert h["access-control-allow-origin"] == "*"
    assert h["cache-control"] == "public, max-age=31536000, immutable"
    assert h["content-security-policy"] == "sandbox"
    assert h["x-request-id"]


async def test_large_download_streams_in_chunks(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    data = bytes(range(256)) * (3 * 4096 + 7)  # ~3 MiB: several 1 MiB reads
    path = await public_path(api, data=data)
    async with cdn.stream("GET", path) as response:
        body = b"".join([chunk async for chunk in response.aiter_raw()])
    assert body == data


@pytest.mark.parametrize(
    "size", [64 * 1024, 64 * 1024 + 1, cdn_module.SMALL_OBJECT_BYTES, cdn_module.SMALL_OBJECT_BYTES + 1]
)
async def test_sizes_around_the_read_bounds(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, size: int
) -> None:
    """Read on the event loop (fs), read whole in a worker thread, or streamed: the same answers."""
    data = (bytes(range(256)) * (size // 256 + 1))[:size]
    path = await public_path(api, data=data)
    response = await cdn.get(path)
    assert (response.status_code, response.content) == (200, data)
    assert response.headers["content-length"] == str(size)
    response = await cdn.get(path, headers={"range": f"bytes={size - 10}-"})
    assert (response.status_code, response.content) == (206, data[-10:])
    assert response.headers["content-range"] == f"bytes {size - 10}-{size - 1}/{size}"
    response = await cdn.head(path)
    assert (response.status_code, response.content) == (200, b"")
    assert response.headers["content-length"] == str(size)


# On disk only: S3 reads are network calls, always in a worker thread.
@pytest.mark.parametrize("settings", ["fs"], indirect=True)
async def test_small_objects_on_disk_are_read_on_the_event_loop(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = await public_path(api)
    larger = await public_path(api, data=b"x" * (64 * 1024 + 1))

    def no_threads(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("a worker-thread trip")

    monkeypatch.setattr(cdn_module, "run_in_threadpool", no_threads)
    assert (await cdn.get(small)).content == DATA
    assert (await cdn.get(small, headers={"range": "bytes=0-0"})).status_code == 206
    # The trip raised: the kit's guard answers that as any unexpected error, a 500.
    assert_error(await cdn.get(larger), 500, "internal")


async def test_head(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    path = await public_path(api)
    response = await cdn.head(path, headers={"range": "bytes=0-9"})  # Range is for GET only
    assert response.status_code == 200
    assert response.headers["content-length"] == str(SIZE)
    assert response.headers["etag"] == (await cdn.get(path)).headers["etag"]
    assert response.content == b""


async def test_empty_object(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    path = await public_path(api, data=b"")
    response = await cdn.get(path)
    assert response.status_code == 200 and response.content == b""
    assert response.headers["content-length"] == "0"
    assert (await cdn.get(path, headers={"range": "bytes=-5"})).status_code == 416


@pytest.mark.parametrize(
    ("header", "start", "end"),
    [
        ("bytes=0-99", 0, 99),
        ("bytes=0-0", 0, 0),
        ("bytes=10239-10239", 10239, 10239),
        ("bytes=9990-", 9990, SIZE - 1),
        ("bytes=-10", SIZE - 10, SIZE - 1),
        ("bytes=-99999", 0, SIZE - 1),
        ("bytes=5000-99999", 5000, SIZE - 1),
        ("Bytes = 1-2 ", 1, 2),
        ("bytes=1-2,", 1, 2),
    ],
)
async def test_single_range(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, header: str, start: int, end: int
) -> None:
    path = await public_path(api)
    response = await cdn.get(path, headers={"range": header})
    assert response.status_code == 206
    assert response.content == DATA[start : end + 1]
    assert response.headers["content-range"] == f"bytes {start}-{end}/{SIZE}"
    assert response.headers["content-length"] == str(end - start + 1)
    assert response.headers["etag"]


@pytest.mark.parametrize("header", ["bytes=10240-", "bytes=20000-30000", "bytes=-0"])
async def test_unsatisfiable_range_is_416(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, header: str
) -> None:
    path = await public_path(api)
    response = await cdn.get(path, headers={"range": header})
    assert_error(response, 416, "range_not_satisfiable")
    assert response.headers["content-range"] == f"bytes */{SIZE}"


@pytest.mark.parametrize(
    "header", ["bytes=0-1,5-6", "bytes=0-1, 20000-", "items=0-1", "bytes=abc", "bytes=5-1", "bytes=-", "0-1"]
)
async def test_other_ranges_get_the_whole_object(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, header: str
) -> None:
    path = await public_path(api)
    response = await cdn.get(path, headers={"range": header})
    assert response.status_code == 200
    assert response.content == DATA
    assert "content-range" not in response.headers


async def test_if_range(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    path = await public_path(api)
    first = await cdn.get(path)
    etag, modified = first.headers["etag"], first.headers["last-modified"]
    for if_range, status in [
        (etag, 206),
        (modified, 206),
        ('"something-else"', 200),
        (f"W/{etag}", 200),  # If-Range compares strongly
        ("Thu, 01 Jan 1970 00:00:00 GMT", 200),
        ("not a date", 200),
    ]:
        response = await cdn.get(path, headers={"range": "bytes=0-9", "if-range": if_range})
        assert response.status_code == status, if_range
        assert response.content == (DATA[:10] if status == 206 else DATA)


async def test_if_none_match(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    path = await public_path(api)
    etag = (await cdn.get(path)).headers["etag"]
    for header in (etag, f'"a", {etag}', f"W/{etag}", "*"):
        response = await cdn.get(path, headers={"if-none-match": header})
        assert response.status_code == 304, header
        assert response.content == b""
        assert response.headers["etag"] == etag
        assert response.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert "content-length" not in response.headers
    assert (await cdn.head(path, headers={"if-none-match": etag})).status_code == 304
    response = await cdn.get(path, headers={"if-none-match": '"other"', "range": "bytes=0-1"})
    assert response.status_code == 206


async def test_if_modified_since(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    path = await public_path(api)
    modified = parsedate_to_datetime((await cdn.get(path)).headers["last-modified"])
    assert (
        await cdn.get(path, headers={"if-modified-since": format_datetime(modified, usegmt=True)})
    ).status_code == 304
    past = "Thu, 01 Jan 1970 00:00:00 GMT"
    assert (await cdn.get(path, headers={"if-modified-since": past})).status_code == 200
    # If-None-Match wins over If-Modified-Since.
    headers = {"if-none-match": '"other"', "if-modified-since": format_datetime(modified, usegmt=True)}
    assert (await cdn.get(path, headers=headers)).status_code == 200
    # RFC 9110 §5.6.7: the obsolete forms too (asctime's has no zone and means GMT; was 200).
    for obsolete in (
        modified.strftime("%A, %d-%b-%y %H:%M:%S GMT"),
        modified.strftime("%a %b %e %H:%M:%S %Y"),
    ):
        assert (await cdn.get(path, headers={"if-modified-since": obsolete})).status_code == 304, obsolete


@pytest.mark.parametrize("header", ["if-modified-since", "if-unmodified-since", "if-range"])
async def test_a_date_that_cannot_be_read_is_ignored(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, header: str
) -> None:
    """RFC 9110 §13.1.3: a date past what Python's date parser holds was a 500."""
    path = await public_path(api)
    for date in (
        "Mon, 01 Jan 2000 00:00:00 +9999999999999999999999",
        "Mon, 01 Jan 99999999999999999999 00:00:00 GMT",
    ):
        headers = {header: date} | ({"range": "bytes=0-9"} if header == "if-range" else {})
        answer = await cdn.get(path, headers=headers)
        assert answer.status_code == 200, (date, answer.text)  # (an unread If-Range: the whole object)


async def test_if_match(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    path = await public_path(api)
    etag = (await cdn.get(path)).headers["etag"]
    assert (await cdn.get(path, headers={"if-match": etag})).status_code == 200
    assert (await cdn.get(path, headers={"if-match": "*"})).status_code == 200
    assert_error(await cdn.get(path, headers={"if-match": '"other"'}), 412, "precondition_failed")
    old = "Thu, 01 Jan 1970 00:00:00 GMT"
    assert_error(await cdn.get(path, headers={"if-unmodified-since": old}), 412, "precondition_failed")


@pytest.mark.parametrize(
    ("filename", "content_type"),
    [
        ("page.html", "text/html"),
        ("page.xhtml", "application/xhtml+xml"),
        ("logo.svg", "image/svg+xml"),
        ("app.js", "text/javascript"),
        ("app.mjs", "application/javascript"),
        ("feed.xml", "application/xml"),
        ("feed.atom", "application/atom+xml"),
        ("page.html", None),  # guessed from the name
    ],
)
async def test_active_content_is_sandboxed(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, filename: str, content_type: str | None
) -> None:
    path = await public_path(
        api, data=b"<script>alert(1)</script>", filename=filename, content_type=content_type
    )
    response = await cdn.get(path)
    assert response.headers["content-security-policy"] == "sandbox"
    assert response.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize(
    ("filename", "content_type"),
    [("a.png", "image/png"), ("a.txt", "text/plain"), ("a.pdf", "application/pdf"), ("a.bin", None)],
)
async def test_every_type_is_sandboxed(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, filename: str, content_type: str | None
) -> None:
    """Issue 23: a PDF (its viewer runs script) rendered unsandboxed on the CDN's origin."""
    path = await public_path(api, filename=filename, content_type=content_type)
    for response in (await cdn.get(path), await cdn.get(path + "-missing")):
        assert response.headers["content-security-policy"] == "sandbox"
        assert response.headers["x-content-type-options"] == "nosniff"


async def test_signed_download(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    stored = await put(api)
    response = await cdn.get(await signed_path(api, stored["key"], 120))
    assert response.status_code == 200 and response.content == DATA
    cache = response.headers["cache-control"]
    assert cache.startswith("private, max-age=")
    assert 110 <= int(cache.split("max-age=")[1]) <= 121
    assert response.headers["access-control-allow-origin"] == "*"
    ranged = await cdn.get(await signed_path(api, stored["key"]), headers={"range": "bytes=-1"})
    assert ranged.status_code == 206 and ranged.content == DATA[-1:]


async def test_expired_signature_is_403(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    key = (await put(api))["key"]
    for expires in (int(time.time()) - 1, int(time.time()) - 86400, 0):
        query = urlencode({"expires": expires, "signature": signing.signature(SECRET.encode(), key, expires)})
        error = assert_error(await cdn.get(f"/{key}?{query}"), 403, "forbidden")
        assert "expired" in error["message"]


async def test_tampered_signatures_are_403(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    key = (await put(api))["key"]
    other = (await put(api))["key"]
    url = await signed_path(api, key)
    base, query_string = url.split("?")
    query = {k: v[0] for k, v in parse_qs(query_string).items()}
    flipped = ("A" if query["signature"][0] != "A" else "B") + query["signature"][1:]
    bad_queries = [
        dict(query, expires=str(int(query["expires"]) + 1000)),
        dict(query, signature=flipped),
        dict(query, signature=query["signature"] + "="),
        dict(query, signature=""),
        dict(query, expires="soon"),
        dict(query, expires=query["expires"] + "\n"),  # (a second URL for one expiry: was 200)
        {"expires": query["expires"]},
        {"signature": query["signature"]},
    ]
    for bad in bad_queries:
        response = await cdn.get(f"{base}?{urlencode(bad)}")
        assert_error(response, 403, "forbidden")
        assert response.headers["access-control-allow-origin"] == "*"
    doubled = f"{base}?{query_string}&expires={query['expires']}"
    assert_error(await cdn.get(doubled), 403, "forbidden")
    # A valid signature for one key does not open another.
    other_path = key_path(other)
    assert_error(await cdn.get(f"{other_path}?{query_string}"), 403, "forbidden")
    # Unknown query parameters are ignored.
    assert (await cdn.get(f"{url}&utm_source=x")).status_code == 200


async def test_not_a_live_object_is_404(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    stored = await put(api, filename="x.bin")
    key = stored["key"]
    org, asset, _ = key.split("/")
    sidecar_like = f"/{org}/{asset}/%25meta.{'0' * 64}.json"
    for path in (
        "/",
        "/nothing",
        f"/{org}/{new_asset_id()}/x.bin",
        f"/{key}x",
        f"/{org}/{asset}/",
        f"/{org}/{asset}",
        f"/{org}/{asset}/x.bin/more",
        sidecar_like,
        f"/{org}/{asset}/..%2Fx.bin",
    ):
        response = await cdn.get(path)
        assert_error(response, 404, "not_found")
        assert response.headers["x-content-type-options"] == "nosniff"
    signed = await signed_path(api, key)
    await api.delete(f"/internal/v1/objects/{key}")
    assert_error(await cdn.get("/" + key), 404, "not_found")
    assert_error(await cdn.get(signed), 404, "not_found")
    assert (await cdn.head("/" + key)).status_code == 404


async def test_other_methods_are_405(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    path = await public_path(api)
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert_error(await cdn.request(method, path), 405, "method_not_allowed")


async def test_options_answers_a_cors_preflight(cdn: httpx.AsyncClient) -> None:
    response = await cdn.options(
        f"/{ORG}/ast_1/a.bin",
        headers={"origin": "https://app.example", "access-control-request-method": "GET"},
    )
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == "*"
    assert "GET" in response.headers["access-control-allow-methods"]
    assert "Range" in response.headers["access-control-allow-headers"]


async def test_serves_nothing_but_downloads(cdn: httpx.AsyncClient) -> None:
    for path in ("/docs", "/redoc", "/openapi.json", "/metrics", "/internal/v1/sign", "/api/assets"):
        assert_error(await cdn.get(path), 404, "not_found")
    assert_error(await cdn.post("/internal/v1/sign", json={}), 405, "method_not_allowed")
    assert (await cdn.get("/healthz")).status_code == 200
    # Alive, but the storage's state is not for the public (issue 11).
    assert_error(await cdn.get("/readyz"), 404, "not_found")


@pytest.mark.parametrize(
    ("header", "status", "content_range"),
    [
        ("bytes=" + "9" * 5000 + "-", 416, f"bytes */{SIZE}"),  # starts past any object
        ("bytes=0-" + "9" * 5000, 206, f"bytes 0-{SIZE - 1}/{SIZE}"),  # ends past the end
        ("bytes=-" + "9" * 5000, 206, f"bytes 0-{SIZE - 1}/{SIZE}"),  # a suffix longer than it
        ("bytes=" + "0" * 5000 + "1-2", 206, f"bytes 1-2/{SIZE}"),  # leading zeros
    ],
)
async def test_range_bounds_with_thousands_of_digits(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, header: str, status: int, content_range: str
) -> None:
    # Over 4,300 digits int() refuses: a 500 once (issue 11).
    path = await public_path(api)
    response = await cdn.get(path, headers={"range": header})
    assert response.status_code == status, response.text
    assert response.headers["content-range"] == content_range
