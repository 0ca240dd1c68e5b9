"""edge tests: the clients against real HTTP servers on loopback standing in for the services."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from coffer_testkit.testing import free_port

Serve = Callable[[web.Application], Awaitable[str]]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Serve an aiohttp application on a free loopback port; answers its base URL."""
    runners: list[web.AppRunner] = []

    async def start(app: web.Application) -> str:
        # In-flight handlers (a stand-in kept slow on purpose) are cancelled at the end, not
        # waited for: 0.1 s, not aiohttp's 60 s (each slow test spent 1.8 s in teardown).
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await runner.setup()
        runners.append(runner)
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        return f"http://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()
