"""The kit's general guards (issue 11): no exception drops a keep-alive connection, a 405 names
every method of its path, the request head is bounded (431), the HTTP parser's refusals carry
the envelope, and /readyz runs its checks at once."""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import socket
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import Request

from coffer_kit.app import base_app
from coffer_kit.guard import BodyLimits
from coffer_kit.health import health_router
from coffer_kit.protocol import MAX_HEAD_BYTES
from coffer_testkit.testing import serving


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _app():  # type: ignore[no-untyped-def]
    # POST /things streams its body (up to 8 MiB), as an upload route does.
    app = base_app(
        "coffer-test", body_limits=BodyLimits(streamed=(("POST", re.compile("/things"), 8 * 1024 * 1024),))
    )

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("a bug")

    @app.get("/things")
    async def list_things() -> dict[str, str]:
        return {"ok": "yes"}

    @app.post("/things")
    async def create_thing(request: Request) -> dict[str, int]:
        return {"size": len(await request.body())}

    @app.delete("/things/{thing_id}")
    async def delete_thing(thing_id: str) -> dict[str, str]:
        return {"ok": thing_id}

    return app


@pytest.fixture(scope="module")
def server() -> str:  # type: ignore[misc]
    with serving(_app(), lifespan="off") as url:
        yield url


def _connection(url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)


def test_an_unhandled_error_answers_the_envelope_and_keeps_the_connection(server: str) -> None:
    conn = _connection(server)
    for _ in range(3):
        conn.request("GET", "/boom")
        response = conn.getresponse()
        body = json.loads(response.read())
        assert response.status == 500
        assert body["error"]["code"] == "internal"
        assert body["error"]["requestId"] == response.getheader("x-request-id")
        assert response.getheader("connection") != "close"
        sock = conn.sock
        assert sock is not None
        # The next request on the same connection is answered: the server did not close it.
        conn.request("GET", "/things")
        ok = conn.getresponse()
        assert ok.status == 200, ok.read()
        ok.read()
        assert conn.sock is sock
    conn.close()


@pytest.mark.anyio
async def test_the_app_itself_returns_normally_after_an_unhandled_error() -> None:
    # ASGITransport re-raises whatever the app raises: a raise is what makes a server close.
    transport = httpx.ASGITransport(app=_app(), raise_app_exceptions=True)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.get("/boom")
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal"


@pytest.mark.anyio
async def test_a_405_allows_every_method_of_the_path() -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_app()), base_url="http://t") as client:
        response = await client.put("/things")
        assert response.status_code == 405
        assert response.json()["error"]["code"] == "method_not_allowed"
        assert response.headers["allow"] == "GET, POST"
        response = await client.post("/things/x")
        assert response.status_code == 405
        assert response.headers["allow"] == "DELETE"


def _raw(url: str, data: bytes, *, read_timeout: float = 10) -> bytes:
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=read_timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _split(response: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def test_a_malformed_request_gets_the_envelope(server: str) -> None:
    status, headers, body = _split(_raw(server, b"NOT HTTP AT ALL\r\n\r\n"))
    assert status == 400
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert error["code"] == "invalid_request"
    assert error["requestId"] == headers["x-request-id"]


def test_a_head_over_the_limit_is_refused_with_431(server: str) -> None:
    filler = b"x" * (MAX_HEAD_BYTES + 1)
    request = b"GET /things HTTP/1.1\r\nhost: t\r\nx-filler: " + filler + b"\r\nconnection: close\r\n\r\n"
    status, headers, body = _split(_raw(server, request))
    assert status == 431
    error = json.loads(body)["error"]
    assert error["code"] == "headers_too_large"
    assert error["requestId"] == headers["x-request-id"]


def test_a_head_within_the_limit_and_a_large_body_pass(server: str) -> None:
    filler = b"x" * (MAX_HEAD_BYTES - 1024)
    request = b"GET /things HTTP/1.1\r\nhost: t\r\nx-filler: " + filler + b"\r\nconnection: close\r\n\r\n"
    assert _split(_raw(server, request))[0] == 200
    # A body that arrives with the head, in the same reads, is not counted as head.
    body = b"{}" + b" " * (4 * 1024 * 1024)
    request = (
        b"POST /things HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
    ) + body
    assert _split(_raw(server, request))[0] == 200


def test_an_endless_header_is_cut_off_early(server: str) -> None:
    """A client streaming one header forever is answered after about MAX_HEAD_BYTES."""
    parts = urlsplit(server)
    sent = 0
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(b"GET /things HTTP/1.1\r\nhost: t\r\nx-big: ")
        block = b"y" * 65536
        try:
            while sent < 128 * 1024 * 1024:
                sock.sendall(block)
                sent += len(block)
        except OSError:  # the server answered and closed: writing fails
            pass
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except OSError:
            pass
    assert sent < 16 * 1024 * 1024, sent
    if answer:  # a reset may discard the answer before it is read; refused early either way
        assert _split(answer)[0] == 431


@pytest.mark.anyio
async def test_readiness_checks_run_at_once() -> None:
    # Each check finishes only once all three have started: run one after another, the first
    # would wait out its CHECK_SECONDS bound and read "down". No sleep stands in for the work.
    started = 0
    all_started = asyncio.Event()

    async def together() -> None:
        nonlocal started
        started += 1
        if started == 3:
            all_started.set()
        await all_started.wait()

    async def slow() -> None:
        await together()

    async def down() -> None:
        await together()
        raise ConnectionError("down")

    app = base_app("coffer-test")
    app.include_router(health_router({"a": slow, "b": slow, "c": down}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        response = await client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"] == {"a": "ok", "b": "ok", "c": "down"}


@pytest.mark.anyio
@pytest.mark.parametrize(
    "body",
    [
        b'{"name": "x\\ud800y"}',  # a lone high surrogate
        b'{"name": "ok", "parentId": "\\udc00"}',  # a lone low one, in another field
        b'{"list": ["a", {"\\uDBFF": 1}]}',  # nested, as a key, upper-case hex
    ],
)
async def test_a_json_body_with_a_lone_surrogate_is_400(body: bytes) -> None:
    app = base_app("coffer-test")
    seen: list[object] = []

    @app.post("/things")
    async def create(request: Request) -> dict[str, str]:
        seen.append(await request.json())
        return {}

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        response = await client.post("/things", content=body, headers={"content-type": "application/json"})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_request"
        assert error["requestId"] == response.headers["x-request-id"]
        assert seen == []
        # A surrogate pair (how JSON writes an emoji) is fine, and the body reaches the route.
        ok = await client.post(
            "/things", content=b'{"name": "\\ud83d\\ude00"}', headers={"content-type": "application/json"}
        )
        assert ok.status_code == 200
        assert seen == [{"name": "😀"}]


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/things/", "/things%2F"])
async def test_a_trailing_slash_is_not_redirected(path: str) -> None:
    """Starlette's default answers a body-less 307 to the path without it, its Location built
    from the client's Host header, before any route (so before authentication): a 404 instead."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_app()), base_url="http://t") as client:
        response = await client.get(path, headers={"host": "evil.example"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert "location" not in response.headers
