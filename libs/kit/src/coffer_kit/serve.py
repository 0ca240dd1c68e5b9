"""Run one process serving one or more listeners (e.g. blob's internal API and CDN host)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator
from dataclasses import dataclass

import uvicorn
from starlette.types import ASGIApp


@dataclass(frozen=True)
class Listener:
    app: ASGIApp
    host: str
    port: int


class _Server(uvicorn.Server):
    # Signals are handled once for all listeners in serve(), not per server.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def serve(listeners: list[Listener], *, graceful_seconds: int = 30) -> None:
    """Serve every listener until SIGINT/SIGTERM, then drain them all gracefully."""

    async def main() -> None:
        servers = [
            _Server(
                uvicorn.Config(
                    listener.app,
                    host=listener.host,
                    port=listener.port,
                    log_config=None,
                    access_log=False,
                    proxy_headers=True,
                    server_header=False,
                    timeout_graceful_shutdown=graceful_seconds,
                    timeout_keep_alive=30,
                )
            )
            for listener in listeners
        ]
        loop = asyncio.get_running_loop()

        def stop() -> None:
            for server in servers:
                server.should_exit = True

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop)
        await asyncio.gather(*(server.serve() for server in servers))

    asyncio.run(main())
