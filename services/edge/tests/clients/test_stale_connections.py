"""A call that meets a pooled connection the server already closed is resent, whatever its
method, because the server never read it; nothing that may have been processed is resent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from coffer_edge.clients.base import ServiceClient
from coffer_kit.contract.errors import CofferError
from coffer_kit.internal import internal_client
from coffer_testkit.testing import free_port

pytestmark = pytest.mark.anyio

# What the server does with the n-th request (0-based) on a connection, after reading it:
# "answer", "drop" (close without answering, as a server that had closed the connection
# just before) or "partial" (answer half a response, then close).
Plan = Callable[[int], str]


class RawServer:
    """An HTTP/1.1 server on a real socket, written out so a test controls every close."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.answered: list[str] = []  # request lines the server processed
        self.dropped: list[str] = []  # request lines read on a connection it then closed
        self.connections = 0
        self.port = free_port()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        n = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                await reader.readexactly(length)
                action = self.plan(n)
                n += 1
                if action == "drop":
                    self.dropped.append(lines[0])
                    break
                self.answered.append(lines[0])
                if action == "partial":
                    writer.write(b'HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{"half')
                    await writer.drain()
                    break
                writer.write(b'HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n{"ok":true}')
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def raw_server() -> AsyncIterator[Callable[[Plan], Any]]:
    servers: list[asyncio.Server] = []

    async def start(plan: Plan) -> tuple[RawServer, ServiceClient]:
        state = RawServer(plan)
        servers.append(await asyncio.start_server(state.handle, "127.0.0.1", state.port))
        http = internal_client(f"http://127.0.0.1:{state.port}", "secret-token", timeout=5)
        clients.append(http)
        return state, ServiceClient(http)

    clients: list[Any] = []
    yield start
    for http in clients:
        await http.close()
    for server in servers:
        server.close()


async def test_a_post_on_a_stale_pooled_connection_is_resent(raw_server: Any) -> None:
    state, client = await raw_server(lambda n: "answer" if n == 0 else "drop")
    assert await client.json("POST", "/first", json={"a": 1}) == {"ok": True}
    # The pooled connection is dead by the time the second call is written on it.
    assert await client.json("POST", "/second", json={"b": 2}) == {"ok": True}
    assert state.answered == ["POST /first HTTP/1.1", "POST /second HTTP/1.1"]
    assert state.dropped == ["POST /second HTTP/1.1"]
    assert state.connections == 2


async def test_a_fresh_connection_that_fails_is_never_resent(raw_server: Any) -> None:
    state, client = await raw_server(lambda _n: "drop")
    with pytest.raises(CofferError) as refused:
        await client.json("POST", "/once", json={})
    assert refused.value.status == 503
    assert state.dropped == ["POST /once HTTP/1.1"]
    assert state.connections == 1


async def test_a_cut_off_response_is_never_resent(raw_server: Any) -> None:
    state, client = await raw_server(lambda n: "answer" if n == 0 else "partial")
    await client.json("POST", "/first", json={})
    with pytest.raises(CofferError) as refused:
        await client.json("POST", "/second", json={})
    assert refused.value.status == 503
    # The server processed it once; it was not sent again.
    assert state.answered == ["POST /first HTTP/1.1", "POST /second HTTP/1.1"]
    assert state.connections == 1


async def test_a_streamed_body_is_never_resent(raw_server: Any) -> None:
    state, client = await raw_server(lambda n: "answer" if n == 0 else "drop")
    await client.json("POST", "/first", json={})

    async def body() -> AsyncIterator[bytes]:
        yield b"part"

    with pytest.raises(CofferError) as refused:
        await client.json("POST", "/upload", content=body())
    assert refused.value.status == 503
    assert state.dropped == ["POST /upload HTTP/1.1"]
    assert state.connections == 1
