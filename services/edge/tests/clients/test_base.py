"""What every internal call does, against a real HTTP server: headers, bodies, error mapping."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from coffer_edge.clients.base import ServiceClient
from coffer_kit.contract.errors import CofferError
from coffer_kit.internal import INTERNAL_TOKEN_HEADER, internal_client
from coffer_testkit.testing import free_port

pytestmark = pytest.mark.anyio


class StandIn:
    """A service on a real socket that records what it was sent."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.chunks_before_end: list[int] = []
        self.slow_calls = 0
        # Never set: /slow answers only when the server cancels it at the end (the fixture's
        # 0.1 s shutdown), so every caller's timeout, however long, runs out first.
        self.never = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/echo/{tail:.*}", self.echo)
        app.router.add_post("/stream", self.stream)
        app.router.add_get("/status/{status}", self.status)
        app.router.add_get("/slow", self.slow)
        return app

    async def echo(self, request: web.Request) -> web.Response:
        self.seen.append(
            {
                "method": request.method,
                "raw_path": request.raw_path,
                "headers": request.headers.copy(),
                "body": await request.read(),
            }
        )
        return web.json_response({"ok": True})

    async def stream(self, request: web.Request) -> web.Response:
        total = 0
        async for chunk in request.content.iter_any():
            total += len(chunk)
            self.chunks_before_end.append(total)
        return web.json_response({"received": total, "chunked": request.headers.get("transfer-encoding")})

    async def status(self, request: web.Request) -> web.Response:
        status = int(request.match_info["status"])
        if request.query.get("envelope"):
            body = {"error": {"code": "some_code", "message": "Told so.", "details": {"field": "x"}}}
            return web.json_response(body, status=status, headers={"Retry-After": "7"})
        return web.Response(status=status, text="not an envelope")

    async def slow(self, _request: web.Request) -> web.Response:
        self.slow_calls += 1
        await self.never.wait()
        return web.json_response({})


@pytest.fixture
async def service(serve: Any) -> AsyncIterator[tuple[StandIn, ServiceClient]]:
    stand_in = StandIn()
    http = internal_client(await serve(stand_in.app()), "secret-token", timeout=5)
    yield stand_in, ServiceClient(http)
    await http.close()


async def test_token_request_id_params_and_json_body(service: tuple[StandIn, ServiceClient]) -> None:
    stand_in, client = service
    answer = await client.json(
        "POST",
        "/echo/a%2Fb/..",
        request_id="req_1",
        headers={"x-key-hash": "h"},
        params={"limit": 5, "age": 3600.0, "folderId": ""},
        json={"name": "é"},
    )
    assert answer == {"ok": True}
    (seen,) = stand_in.seen
    assert seen["method"] == "POST"
    # The path goes as written: an encoded "/" stays encoded and ".." is not resolved.
    assert seen["raw_path"] == "/echo/a%2Fb/..?limit=5&age=3600.0&folderId="
    assert seen["headers"][INTERNAL_TOKEN_HEADER] == "secret-token"
    assert seen["headers"]["x-request-id"] == "req_1"
    assert seen["headers"]["x-key-hash"] == "h"
    assert seen["headers"]["Content-Type"] == "application/json"
    assert json.loads(seen["body"]) == {"name": "é"}


async def test_a_base_url_path_is_kept(serve: Any) -> None:
    stand_in = StandIn()
    base = await serve(stand_in.app())
    async with internal_client(base + "/echo/", "t") as http:
        await ServiceClient(http).request("GET", "/under")
    assert stand_in.seen[0]["raw_path"] == "/echo/under"


async def test_a_body_is_streamed_as_it_is_produced(service: tuple[StandIn, ServiceClient]) -> None:
    stand_in, client = service
    first_arrived = asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        yield b"x" * 1000
        # The server has the first chunk before the second is even produced.
        async with asyncio.timeout(5):
            while not stand_in.chunks_before_end:
                await asyncio.sleep(0.01)
        first_arrived.set()
        yield b"y" * 500

    answer = await client.json("POST", "/stream", content=body(), headers={"content-type": "x/y"})
    assert answer == {"received": 1500, "chunked": "chunked"}
    assert first_arrived.is_set()
    assert stand_in.chunks_before_end[0] == 1000


async def test_a_failing_body_is_a_transport_error(service: tuple[StandIn, ServiceClient]) -> None:
    _, client = service

    async def body() -> AsyncIterator[bytes]:
        yield b"x" * 1000
        raise CofferError(413, "file_too_large", "too large")

    with pytest.raises(CofferError) as caught:
        await client.request("POST", "/stream", content=body())
    assert (caught.value.status, caught.value.code) == (503, "unavailable")


async def test_an_error_envelope_is_relayed(service: tuple[StandIn, ServiceClient]) -> None:
    _, client = service
    with pytest.raises(CofferError) as caught:
        await client.request("GET", "/status/409", params={"envelope": "1"})
    error = caught.value
    assert (error.status, error.code, error.message) == (409, "some_code", "Told so.")
    assert error.details == {"field": "x"}
    assert error.headers == {"Retry-After": "7"}


@pytest.mark.parametrize(
    ("status", "envelope", "expected"),
    [
        (500, True, (500, "internal")),
        (502, False, (500, "internal")),
        (503, False, (503, "unavailable")),
        (503, True, (503, "some_code")),
        (404, False, (500, "internal")),
    ],
)
async def test_failures_map_to_our_errors(
    service: tuple[StandIn, ServiceClient], status: int, envelope: bool, expected: tuple[int, str]
) -> None:
    _, client = service
    params = {"envelope": "1"} if envelope else {}
    with pytest.raises(CofferError) as caught:
        await client.request("GET", f"/status/{status}", params=params)
    assert (caught.value.status, caught.value.code) == expected


async def test_unreachable_is_503_with_retry_after() -> None:
    async with internal_client(f"http://127.0.0.1:{free_port()}", "t", timeout=5) as http:
        with pytest.raises(CofferError) as caught:
            await ServiceClient(http).request("GET", "/anything")
    assert (caught.value.status, caught.value.code) == (503, "unavailable")
    assert caught.value.headers == {"Retry-After": "1"}


async def test_a_read_timeout_is_503(serve: Any) -> None:
    stand_in = StandIn()
    base = await serve(stand_in.app())
    async with internal_client(base, "t", timeout=5, read_timeout=0.2) as http:
        with pytest.raises(CofferError) as caught:
            await ServiceClient(http).request("GET", "/slow")
    assert (caught.value.status, caught.value.code) == (503, "unavailable")
    assert stand_in.slow_calls >= 1, "the request reached the server: the 503 is the timeout's"


async def test_a_call_timeout_is_503(service: tuple[StandIn, ServiceClient]) -> None:
    stand_in, client = service
    with pytest.raises(CofferError) as caught:
        await client.request("GET", "/slow", timeout=0.2)
    assert (caught.value.status, caught.value.code) == (503, "unavailable")
    assert stand_in.slow_calls >= 1, "the request reached the server: the 503 is the timeout's"
