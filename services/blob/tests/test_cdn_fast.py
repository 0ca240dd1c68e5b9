"""The CDN's fast download layer (cdn.FastDownloads): which requests it answers, and that its
answers are the declared route's, header for header and byte for byte."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.middleware import Middleware
from starlette.types import Receive, Scope, Send

from coffer_blob import cdn as cdn_module
from coffer_blob import signing
from coffer_blob.config import Settings
from coffer_blob.main import create_cdn_app
from coffer_testkit.testing import app_client

from .support import CDN_URL, SECRET
from .test_cdn import key_path, put, signed_path

pytestmark = pytest.mark.anyio

HANDED_OVER = 599


class HandedOver:
    """Stands where the rest of the app would: answers 599 to whatever reaches it."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, _scope: Scope, _receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": HANDED_OVER, "headers": []})
        await send({"type": "http.response.body", "body": b""})


@pytest.fixture(params=["fs"])
def settings(request: pytest.FixtureRequest) -> Settings:
    """On disk unless a test asks for S3."""
    return request.getfixturevalue("settings" if request.param == "fs" else "s3_settings")  # type: ignore[no-any-return]


def fast_layer_index(app: FastAPI) -> int:
    return next(i for i, m in enumerate(app.user_middleware) if m.cls is cdn_module.FastDownloads)


@pytest.fixture
async def fast_only(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The CDN app with everything past the fast layer answering 599."""
    app = create_cdn_app(settings)
    app.user_middleware.insert(fast_layer_index(app) + 1, Middleware(HandedOver))
    async with app_client(app, CDN_URL) as client:
        yield client


@pytest.fixture
async def declared_only(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The CDN app without the fast layer: every download takes the declared route."""
    app = create_cdn_app(settings)
    del app.user_middleware[fast_layer_index(app)]
    async with app_client(app, CDN_URL) as client:
        yield client


async def requests(api: httpx.AsyncClient) -> dict[str, tuple[str, str, dict[str, str]]]:
    """Name → (method, path, headers): the plain downloads first, then every kind handed over."""
    small = await put(api, filename="résumé final.pdf", content_type="application/pdf")
    page = await put(api, data=b"<html></html>", filename="page.html", content_type="text/html")
    larger = await put(api, data=b"x" * (cdn_module.SMALL_OBJECT_BYTES // 4 + 1))
    gone = await put(api)
    deleted = await api.delete(f"/internal/v1/objects/{gone['key']}")
    assert deleted.json() == {"deleted": True}
    path = key_path(small["key"])
    signed = await signed_path(api, small["key"])
    past = int(time.time()) - 10
    expired = f"expires={past}&signature={signing.signature(SECRET.encode(), small['key'], past)}"
    return {
        "public": ("GET", path, {}),
        "active content": ("GET", key_path(page["key"]), {}),
        "signed": ("GET", signed, {}),
        "unrelated query": ("GET", f"{path}?utm_source=mail", {}),
        # handed over from here on
        "bad signature": ("GET", signed[:-4] + "AAAA", {}),
        "expired": ("GET", f"{path}?{expired}", {}),
        "two signatures": ("GET", f"{signed}&signature=x", {}),
        "deleted": ("GET", key_path(gone["key"]), {}),
        "not a key": ("GET", "/healthz/nothing", {}),
        "range": ("GET", path, {"range": "bytes=0-9"}),
        "if-none-match": ("GET", path, {"if-none-match": f'"{small["sha256"]}"'}),
        "if-modified-since": ("GET", path, {"if-modified-since": "Mon, 01 Jan 2024 00:00:00 GMT"}),
        "head": ("HEAD", path, {}),
        "preflight": (
            "OPTIONS",
            path,
            {"origin": "https://app.example", "access-control-request-method": "GET"},
        ),
        "past the inline read": ("GET", key_path(larger["key"]), {}),
    }


PLAIN = ("public", "active content", "signed", "unrelated query")


@pytest.mark.parametrize("settings", ["fs"], indirect=True)
async def test_the_fast_layer_answers_plain_downloads_and_hands_over_the_rest(
    api: httpx.AsyncClient, fast_only: httpx.AsyncClient
) -> None:
    answered = {}
    for name, (method, path, headers) in (await requests(api)).items():
        answered[name] = (await fast_only.request(method, path, headers=headers)).status_code
    assert answered == {name: 200 if name in PLAIN else HANDED_OVER for name in answered}


@pytest.mark.parametrize("settings", ["s3"], indirect=True)
async def test_on_s3_every_download_is_handed_over(
    api: httpx.AsyncClient, fast_only: httpx.AsyncClient
) -> None:
    """S3 reads are network calls: never on the event loop, so never in the fast layer."""
    for method, path, headers in (await requests(api)).values():
        assert (await fast_only.request(method, path, headers=headers)).status_code == HANDED_OVER


@pytest.mark.parametrize("settings", ["fs"], indirect=True)
async def test_the_fast_layer_answers_exactly_as_the_declared_route(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, declared_only: httpx.AsyncClient
) -> None:
    for name, (method, path, headers) in (await requests(api)).items():
        answers = [await client.request(method, path, headers=headers) for client in (cdn, declared_only)]
        seen = [what_a_client_sees(answer) for answer in answers]
        assert seen[0] == seen[1], name


def what_a_client_sees(response: httpx.Response) -> tuple[int, list[tuple[str, str]], Any]:
    """Status, headers in order and body; the request id (new on every request) left out."""
    headers = [(k, v) for k, v in response.headers.multi_items() if k != "x-request-id"]
    if response.headers.get("content-type") == "application/json":
        body = response.json()
        body["error"].pop("requestId")
        return response.status_code, headers, body
    return response.status_code, headers, response.content
