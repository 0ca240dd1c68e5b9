"""X-Request-Id (CONTRACT §1, docs/api.md): a sent id of 1-128 characters of the documented set
is echoed, in the header and in the error envelope; anything else, control characters above
all, is replaced by a generated ``req_`` id and never reaches a header or a log line."""

from __future__ import annotations

import logging
import re
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from coffer_kit.app import base_app
from coffer_kit.contract.errors import not_found
from coffer_kit.contract.ids import REQUEST, id_pattern
from coffer_kit.middleware import REQUEST_ID_MAX_LENGTH

GENERATED = id_pattern(REQUEST)

ECHOED = [
    "trace/1+abc==",  # base64 with a path-like prefix (issue 28)
    "my-trace-123",
    "0af7651916cd43dd8448eb211c80319c",  # a W3C trace id
    "4bf92f35-77b3-4da0-a7e0-3a1e8f6f0c2e",  # a UUID
    "01JD2W3X4Y5Z6A7B8C9D0E1F2G",  # a ULID
    "gateway:req.42_a~b",
    "YWJj-_ZGVm",  # base64url
    "x",
    "x" * REQUEST_ID_MAX_LENGTH,
]

REPLACED = [
    "x" * (REQUEST_ID_MAX_LENGTH + 1),
    "two words",
    "a,b",  # a comma would read as two values of a list header
    'quote"d',
    "back\\slash",
    "semi;colon",
    "<script>",
]

# Raw header bytes: control characters, and UTF-8 (not ASCII).
RAW = [
    b"line\nbreak",
    b"trailing\n",  # the old check's `$` matched before it, so this one was echoed
    b"carriage\rreturn",
    b"tab\tbed",
    b"nul\x00",
    b"esc\x1b[31m",
    b"del\x7f",
    "caf\u00e9".encode(),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def app() -> FastAPI:
    app = base_app("coffer-test")

    @app.get("/ok")
    async def ok() -> dict[str, str]:
        return {"ok": "yes"}

    @app.get("/missing")
    async def missing() -> None:
        raise not_found("Nothing here.")

    return app


async def _get(app: FastAPI, path: str, request_id: str | None) -> httpx.Response:
    headers = {"x-request-id": request_id} if request_id is not None else {}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        return await client.get(path, headers=headers)


@pytest.mark.anyio
@pytest.mark.parametrize("request_id", ECHOED)
async def test_a_request_id_of_the_documented_set_is_echoed(app: FastAPI, request_id: str) -> None:
    response = await _get(app, "/ok", request_id)
    assert response.status_code == 200
    assert response.headers.get_list("x-request-id") == [request_id]
    error = await _get(app, "/missing", request_id)
    assert error.status_code == 404
    assert error.headers["x-request-id"] == request_id
    assert error.json()["error"]["requestId"] == request_id


@pytest.mark.anyio
@pytest.mark.parametrize("request_id", REPLACED)
async def test_any_other_request_id_is_replaced(app: FastAPI, request_id: str) -> None:
    error = await _get(app, "/missing", request_id)
    generated = error.headers["x-request-id"]
    assert generated != request_id
    assert error.json()["error"]["requestId"] == generated
    assert re.fullmatch(GENERATED, generated), generated


@pytest.mark.anyio
async def test_no_request_id_gets_a_generated_one(app: FastAPI) -> None:
    first = (await _get(app, "/ok", None)).headers["x-request-id"]
    second = (await _get(app, "/ok", None)).headers["x-request-id"]
    assert first != second


async def _raw(app: FastAPI, value: bytes) -> tuple[list[tuple[bytes, bytes]], str]:
    """Call the ASGI app with ``value`` as the header's raw bytes, which no HTTP client sends (a
    server's parser may pass bytes a client library refuses); answers the response headers and
    the request id the app saw."""
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/ok",
        "raw_path": b"/ok",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"t"), (b"x-request-id", value)],
        "client": ("127.0.0.1", 1),
        "server": ("t", 80),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["headers"], scope["state"]["request_id"]


@pytest.mark.anyio
@pytest.mark.parametrize("request_id", RAW)
async def test_control_characters_never_reach_a_header_or_a_log_line(
    app: FastAPI, request_id: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="coffer.access"):
        headers, seen = await _raw(app, request_id)
    (echoed,) = [v for k, v in headers if k == b"x-request-id"]
    assert re.fullmatch(GENERATED, echoed.decode()), echoed
    assert seen == echoed.decode()
    logged = [r for r in caplog.records if r.name == "coffer.access"]
    assert logged and all(getattr(r, "request_id", None) == seen for r in logged)


@pytest.mark.anyio
async def test_a_polled_route_answers_quietly_unless_it_fails(caplog: pytest.LogCaptureFixture) -> None:
    """edge's workers poll their queues about once a second: an idle stack logged three access
    lines a second of nothing. A poll's answer is logged at DEBUG; a failed one still at INFO."""
    app = base_app("coffer-test")
    failing = {"now": False}

    @app.post("/internal/v1/facts/claim")
    async def claim() -> dict[str, list[str]]:
        if failing["now"]:
            raise not_found("Nothing here.")
        return {"claimed": []}

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        with caplog.at_level(logging.INFO, logger="coffer.access"):
            assert (await client.post("/internal/v1/facts/claim")).status_code == 200
            assert (await client.get("/ok-or-not")).status_code == 404
            failing["now"] = True
            assert (await client.post("/internal/v1/facts/claim")).status_code == 404
    logged = [
        (r.levelno, r.__dict__.get("route"), r.__dict__.get("status"))
        for r in caplog.records
        if r.name == "coffer.access"
    ]
    assert logged == [  # (at INFO, the answered poll is not there)
        (logging.INFO, "unmatched", 404),
        (logging.INFO, "/internal/v1/facts/claim", 404),
    ]
