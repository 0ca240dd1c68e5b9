"""A client that sends slowly holds a connection for a bounded time only, before any route and
so before authentication: a connection that sends nothing is closed, a request head that does
not end in time is answered 408, and so is a body read whole (JSON, forms) that goes quiet or
does not end in time. Over real sockets against the kit's server (``server_config``), with the
bounds shortened; what legitimately takes longer (a keep-alive connection idle between
requests, a long streamed answer, a slow but steady upload) is left alone."""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import socket
import time
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from coffer_kit.app import base_app
from coffer_kit.guard import BodyLimits
from coffer_kit.protocol import CofferHttpProtocol
from coffer_testkit.testing import serving

HEAD_SECONDS = 1.0
IDLE_SECONDS = 1.0
BODY_SECONDS = 2.0
# Every refusal below must come well before this; the test fails if the socket is still open.
WITHIN = 5.0
# How often a trickling client sends its next piece: well inside every bound.
EVERY = 0.25


def _app() -> FastAPI:
    limits = BodyLimits(
        idle_seconds=IDLE_SECONDS,
        body_seconds=BODY_SECONDS,
        streamed=(("POST", re.compile("/upload"), 8 * 1024 * 1024),),
    )
    app = base_app("coffer-test", body_limits=limits)

    @app.get("/things")
    async def things() -> dict[str, str]:
        return {"ok": "yes"}

    @app.post("/things")
    async def create(request: Request) -> dict[str, int]:
        return {"size": len(await request.body())}

    @app.post("/upload")
    async def upload(request: Request) -> dict[str, int]:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
        return {"size": size}

    @app.get("/slow")
    async def slow() -> StreamingResponse:
        async def pieces() -> AsyncIterator[bytes]:
            for _ in range(8):  # 2 s: longer than the head's and the body's bounds
                yield b"x" * 10
                await asyncio.sleep(EVERY)

        return StreamingResponse(pieces(), media_type="application/octet-stream")

    return app


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CofferHttpProtocol, "head_timeout_seconds", HEAD_SECONDS)
        with serving(_app(), lifespan="off") as url:
            yield url


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=WITHIN)
    sock.settimeout(EVERY)
    return sock


def _until_closed(sock: socket.socket, piece: bytes | None = None) -> tuple[bytes, float]:
    """What the server sends until it closes the connection, and how long that took; sends
    ``piece`` every EVERY seconds meanwhile (a client trickling its request). Fails if the
    connection is still open after WITHIN seconds."""
    started = time.monotonic()
    answer = b""
    with sock:
        while time.monotonic() - started < WITHIN:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                if piece is not None:
                    sock.sendall(piece)
                continue
            except ConnectionResetError:
                return answer, time.monotonic() - started
            if not chunk:
                return answer, time.monotonic() - started
            answer += chunk
    pytest.fail(f"the connection was still open after {WITHIN} s; it answered {answer!r}")


def _split(response: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def _assert_408(answer: bytes) -> dict[str, str]:
    status, headers, body = _split(answer)
    assert status == 408, answer
    error = json.loads(body)["error"]
    assert error["code"] == "request_timeout"
    assert error["requestId"] == headers["x-request-id"]
    assert headers["connection"] == "close"
    return error  # type: ignore[no-any-return]


def test_a_connection_that_sends_nothing_is_closed(server: str) -> None:
    answer, took = _until_closed(_connect(server))
    assert answer == b""
    assert took >= HEAD_SECONDS * 0.9


def test_a_head_that_never_ends_is_answered_408(server: str) -> None:
    sock = _connect(server)
    sock.sendall(b"GET /things HTTP/1.1\r\nhost: t\r\n")
    answer, took = _until_closed(sock, b"x-more: y\r\n")
    _assert_408(answer)
    assert took >= HEAD_SECONDS * 0.9


def test_a_head_that_never_ends_after_a_first_request_is_answered_408(server: str) -> None:
    """The bound is armed again for each request of a keep-alive connection."""
    sock = _connect(server)
    sock.sendall(b"GET /things HTTP/1.1\r\nhost: t\r\n\r\n")
    first = b""
    while b'{"ok":"yes"}' not in first:
        try:
            first += sock.recv(65536)
        except TimeoutError:
            continue
    assert _split(first)[0] == 200
    sock.sendall(b"GET /things HTTP/1.1\r\nhost: t\r\n")
    answer, _ = _until_closed(sock, b"x-more: y\r\n")
    _assert_408(answer)


def test_a_json_body_that_trickles_is_answered_408(server: str) -> None:
    """One byte every EVERY seconds never goes quiet for IDLE_SECONDS: the whole body's bound
    stops it."""
    sock = _connect(server)
    sock.sendall(
        b"POST /things HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{"
    )
    answer, took = _until_closed(sock, b" ")
    error = _assert_408(answer)
    assert str(BODY_SECONDS).rstrip("0").rstrip(".") in error["message"]
    assert took >= BODY_SECONDS * 0.9


def test_a_json_body_that_goes_quiet_is_answered_408(server: str) -> None:
    sock = _connect(server)
    sock.sendall(
        b"POST /things HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{"
    )
    answer, took = _until_closed(sock)
    _assert_408(answer)
    assert IDLE_SECONDS * 0.9 <= took < BODY_SECONDS


def test_keep_alive_requests_long_answers_and_slow_steady_uploads_pass(server: str) -> None:
    parts = urlsplit(server)
    assert parts.hostname is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=WITHIN)
    for _ in range(3):
        conn.request("GET", "/things")
        response = conn.getresponse()
        assert response.status == 200
        assert response.read() == b'{"ok":"yes"}'
    sock = conn.sock
    # Idle between two requests for longer than the head's bound: keep-alive's own bound
    # (30 s) applies there, not the head's.
    time.sleep(HEAD_SECONDS * 1.5)
    conn.request("POST", "/things", body=b'{"a": 1}', headers={"content-type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    assert json.loads(response.read()) == {"size": 8}
    # An answer streamed for longer than the head's and the body's bounds arrives whole.
    conn.request("GET", "/slow")
    response = conn.getresponse()
    assert response.status == 200
    assert response.read() == b"x" * 80
    assert conn.sock is sock
    conn.close()
    # An upload (a streamed body) sent slowly but steadily for longer than every bound above.
    with _connect(server) as upload:
        upload.sendall(b"POST /upload HTTP/1.1\r\nhost: t\r\ncontent-length: 12\r\nconnection: close\r\n\r\n")
        for _ in range(12):
            time.sleep(EVERY)  # the client's pace, not a wait for a condition
            upload.sendall(b"u")
        upload.settimeout(WITHIN)
        answer = b""
        while chunk := upload.recv(65536):
            answer += chunk
    status, _, body = _split(answer)
    assert status == 200, answer
    assert json.loads(body) == {"size": 12}
