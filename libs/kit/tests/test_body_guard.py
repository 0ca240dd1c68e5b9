"""Every request body bounded before any route (issue 23): JSON and forms past the body bound
→ 413 from Content-Length or while counting, a streamed route's Content-Length past its own
bound → 413, JSON nested past the depth bound → 400 (10,000 levels were a RecursionError, a
500), and the route sees exactly what was sent when it is within bounds."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import Request

from coffer_kit.app import base_app
from coffer_kit.guard import BodyLimits, json_too_deep
from coffer_testkit.testing import assert_error

pytestmark = pytest.mark.anyio
LIMIT = 4096
STREAMED = 1024 * 1024


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    limits = BodyLimits(body_bytes=LIMIT, json_depth=8, streamed=(("POST", re.compile("/upload"), STREAMED),))
    app = base_app("coffer-test", body_limits=limits)
    seen: list[int] = []

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, int]:
        seen.append(1)
        return {"size": len(await request.body())}

    @app.post("/upload")
    async def upload(request: Request) -> dict[str, int]:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
        return {"size": size}

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        c.seen = seen  # type: ignore[attr-defined]
        yield c


async def test_a_body_at_the_bound_passes_and_one_byte_more_is_refused(client: httpx.AsyncClient) -> None:
    at = b'"' + b"a" * (LIMIT - 2) + b'"'
    answer = await client.post("/echo", content=at, headers={"content-type": "application/json"})
    assert answer.status_code == 200 and answer.json() == {"size": LIMIT}
    over = at + b" "
    refused = await client.post("/echo", content=over, headers={"content-type": "application/json"})
    error = assert_error(refused, 413, "body_too_large")
    assert error["message"] == "The request body is larger than 4,096 bytes."
    # A form is bounded the same way.
    assert_error(await client.post("/echo", data={"f": "x" * LIMIT}), 413, "body_too_large")


async def test_a_chunked_body_is_counted_as_it_arrives(client: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(100):  # 100 KiB in all, with no Content-Length
            yield b" " * 1024

    refused = await client.post("/echo", content=chunks(), headers={"content-type": "application/json"})
    assert_error(refused, 413, "body_too_large")
    assert client.seen == []  # type: ignore[attr-defined]


async def test_a_streamed_route_has_its_own_bound_from_content_length(client: httpx.AsyncClient) -> None:
    answer = await client.post("/upload", content=b"x" * STREAMED)
    assert answer.status_code == 200 and answer.json() == {"size": STREAMED}
    assert_error(await client.post("/upload", content=b"x" * (STREAMED + 1)), 413, "file_too_large")


@pytest.mark.parametrize("depth", [8, 9, 2000])
async def test_json_nesting_is_bounded(client: httpx.AsyncClient, depth: int) -> None:
    body = b"[" * depth + b"]" * depth
    answer = await client.post("/echo", content=body, headers={"content-type": "application/json"})
    if depth <= 8:
        assert answer.status_code == 200
    else:
        error = assert_error(answer, 400, "invalid_request")
        assert error["message"] == "The JSON body nests deeper than 8 levels."


def test_brackets_inside_strings_are_not_nesting() -> None:
    text = json.dumps({"a": "[[[[[[[[[[{{{{{{{{", "b": ['\\"[[[[[[[[[['], "c": [[[]]]}).encode()
    assert not json_too_deep(text, 4)  # the object, then [[[ ]]]
    assert json_too_deep(text, 3)
    assert json_too_deep(b'{"a": "x\\\\"' + b"[" * 5, 4)  # an escaped backslash ends the string
