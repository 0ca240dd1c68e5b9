"""edge's upload relay gives up on a blob that stops reading (write timeout), answers 503 and
cleans up, instead of waiting forever."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from aiohttp import web
from pydantic import SecretStr

from coffer_edge.config import EdgeTuning, Settings
from coffer_edge.main import create_app
from coffer_testkit.testing import assert_error, free_port

pytestmark = pytest.mark.anyio

ORG = "org_01JD0000000000000000000000"


class StalledBlob:
    """A blob stand-in that takes upload connections and never reads them; answers the rest."""

    def __init__(self) -> None:
        self.port = free_port()
        self.calls: list[str] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            line = head.split(b"\r\n", 1)[0].decode()
            self.calls.append(line)
            if " /internal/v1/uploads/" in line:
                await asyncio.Event().wait()  # stalled for good: nothing more is read
            body = b'{"deleted": true}'
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body) + body
            )
            await writer.drain()
        finally:
            writer.close()


def _services() -> tuple[web.Application, list[str]]:
    calls: list[str] = []

    async def principal(_request: web.Request) -> web.Response:
        return web.json_response(
            {
                "organizationId": ORG,
                "keyId": "key_1",
                "keyKind": "org",
                "userId": None,
                "quotaBytes": 10**12,
                "keyExpiresAt": None,
            }
        )

    async def intent(request: web.Request) -> web.Response:
        calls.append(f"{request.method} {request.path}")
        if request.method == "POST":
            return web.json_response({"prefix": f"{ORG}/x/"}, status=201)
        return web.json_response({"success": True})

    app = web.Application()
    app.router.add_get("/internal/v1/principal", principal)
    app.router.add_route("*", "/internal/v1/orgs/{org}/intents{tail:.*}", intent)
    return app, calls


async def test_an_upload_to_a_blob_that_stops_reading_ends_in_503(serve: Any, tmp_path: Path) -> None:
    services, metadata_calls = _services()
    url = await serve(services)
    blob = StalledBlob()
    server = await asyncio.start_server(blob.handle, "127.0.0.1", blob.port)
    settings = Settings(
        data_dir=tmp_path,
        internal_token=SecretStr("t" * 32),
        auth_url=url,
        metadata_url=url,
        blob_url=f"http://127.0.0.1:{blob.port}",
        sweep_interval_seconds=0,
        edge_tuning=EdgeTuning(blob_write_timeout_seconds=1.0),
    )
    app = create_app(settings)

    async def body() -> AsyncIterator[bytes]:
        yield b'--B\r\nContent-Disposition: form-data; name="file"; filename="a.bin"\r\n\r\n'
        for _ in range(64):  # far more than the socket buffers hold
            yield b"x" * (1024 * 1024)
        yield b"\r\n--B--\r\n"

    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://edge", timeout=60) as client:
                started = time.monotonic()
                with anyio.fail_after(30):
                    response = await client.post(
                        "/api/assets",
                        content=body(),
                        headers={"x-api-key": "k", "content-type": "multipart/form-data; boundary=B"},
                    )
                elapsed = time.monotonic() - started
    finally:
        server.close()
    assert_error(response, 503, "unavailable")
    assert elapsed < 10, elapsed
    # Cleaned up: blob's prefix deleted, then the intent abandoned.
    assert any(call.startswith("DELETE /internal/v1/prefixes/") for call in blob.calls), blob.calls
    assert metadata_calls[0].startswith("POST") and metadata_calls[-1].startswith("DELETE"), metadata_calls
