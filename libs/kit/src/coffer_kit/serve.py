"""Run one process serving one or more listeners (e.g. blob's internal API and CDN host)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import signal
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp
from uvicorn.config import Config
from uvicorn.server import Server as UvicornServer

from coffer_kit.protocol import CofferHttpProtocol
from coffer_kit.tracing import shutdown_tracing


@dataclass(frozen=True)
class Listener:
    app: ASGIApp
    host: str
    port: int
    # Served by an event loop of its own, in its own thread: nothing the other listeners' loop
    # does (parsing an upload, say) ever delays it by more than the interpreter's switch
    # interval (5 ms), since it never waits on that loop.
    own_loop: bool = False


def _glibc(name: str) -> Any:
    """The C library's function ``name`` on Linux, if it has one (musl lacks malloc_trim)."""
    if not sys.platform.startswith("linux"):
        return None
    return getattr(ctypes.CDLL(None), name, None)


def release_free_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere a no-op).

    glibc returns only the top of its heaps by itself; the free pages in the middle stay
    resident. Start-up (imports, the routes' validators, the lifespan) leaves some of them in
    every service, and a first upload more in metadata and blob (bench/results/journal.md,
    "Issue 16, round 4: idle RSS").
    """
    trim = _glibc("malloc_trim")
    if trim is not None:
        trim(0)


# glibc's mallopt parameters, and the values a served process runs with.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
HEAP_MMAP_THRESHOLD = 4 * 1024 * 1024
HEAP_TRIM_THRESHOLD = 16 * 1024 * 1024


def keep_freed_memory() -> None:
    """Let the C heap keep what the process frees (up to ``HEAP_TRIM_THRESHOLD`` at its top)
    for the next allocation, rather than hand it back to the kernel at every free (glibc's
    ``mallopt``; elsewhere a no-op).

    A body streams through in pieces of up to 256 KiB (a socket read), each copied a few
    times on the way; with glibc's own thresholds most of those buffers were mapped and
    unmapped, or the heap's top trimmed, piece after piece, so the next one's pages faulted
    in again, in edge and in blob, where a virtual machine pays its host for each
    (docs/performance.md#this-machine-memory-noise-and-swings; the faults and the upload's A/B:
    bench/results/journal.md, the runs of 2026-11-27 06:31, "What changed this session", 2).
    Buffers of up to ``HEAP_MMAP_THRESHOLD`` come from the heap.
    An idle process still gives its free pages back (``release_free_memory``).
    """
    mallopt = _glibc("mallopt")
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD)
        mallopt(_M_TRIM_THRESHOLD, HEAP_TRIM_THRESHOLD)


def freeze_start_up_objects() -> None:
    """Leave what start-up made (modules, routes, validators, the lifespan's state) out of every
    later garbage collection: collect once, then ``gc.freeze()`` it into the permanent generation.

    A request that frees all it allocates never starts a collection; one whose objects outlive
    it does: a traced request's spans wait in the exporter's queue for up to 512 others, so
    every few dozen requests start one, and every few hundred a full one that walked the whole
    start-up heap (issue 28, measured with bench/trace_probe.py --heap --gc-freeze:
    bench/results/journal.md, "Issue 28: tracing's cost"). Frozen objects are still freed when
    their last reference goes; only start-up's cycles that become garbage later would stay.
    """
    gc.collect()
    gc.freeze()


class Server(UvicornServer):
    """uvicorn's server, waking once a second instead of ten times; signals are left to whoever
    runs it (serve() handles them once for all listeners; a test's thread has none)."""

    tick_seconds = 1.0
    _loop: asyncio.AbstractEventLoop | None = None
    _woken: asyncio.Event | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def main_loop(self) -> None:
        # uvicorn's own loop wakes every 0.1 s to see whether it should stop, CPU that every idle
        # listener spends for nothing (bench/results/journal.md, the runs of 2026-11-27 06:31,
        # "What changed this session", 3). What its tick does (the date header, the trim below)
        # is once a second anyway; exit() wakes it for a stop.
        self._loop, self._woken = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 10) % 864000  # uvicorn's own counter: a multiple of 10 a second
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.tick_seconds):
                    await self._woken.wait()

    def exit(self) -> None:
        """Stop serving (draining what is in flight) at once; callable from any thread."""
        self.should_exit = True
        loop, woken = self._loop, self._woken
        if loop is not None and woken is not None:
            with contextlib.suppress(RuntimeError):  # its loop has already ended
                loop.call_soon_threadsafe(woken.set)


class _Server(Server):
    """A service's server: start-up objects frozen, and the heap trimmed once it listens and
    whenever it falls idle."""

    _answered_at_trim = 0
    _answered_at_tick = 0

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        freeze_start_up_objects()
        release_free_memory()

    async def on_tick(self, counter: int) -> bool:
        # Once a second: requests were answered since the last trim, none in the last second
        # and none is in flight, so the process has gone idle: trim (about a millisecond). A
        # busy process never trims; an idle one trims once.
        answered = self.server_state.total_requests
        idle = answered == self._answered_at_tick and not self.server_state.tasks
        if idle and answered != self._answered_at_trim:
            release_free_memory()
            self._answered_at_trim = answered
        self._answered_at_tick = answered
        return await super().on_tick(counter)


def server_config(listener: Listener, *, graceful_seconds: int = 30) -> Config:
    """How every Coffer listener is served (tests serve through the same settings)."""
    return Config(
        listener.app,
        http=CofferHttpProtocol,  # a bounded request head, enveloped parser errors
        ws="none",  # no service speaks WebSocket: no websockets import, no upgrade path
        host=listener.host,
        port=listener.port,
        log_config=None,
        access_log=False,
        proxy_headers=True,
        server_header=False,
        timeout_graceful_shutdown=graceful_seconds,
        timeout_keep_alive=30,
    )


def serve(listeners: list[Listener], *, graceful_seconds: int = 30) -> None:
    """Serve every listener until SIGINT/SIGTERM, then drain them all gracefully."""
    keep_freed_memory()

    async def main() -> None:
        servers = [
            _Server(server_config(listener, graceful_seconds=graceful_seconds)) for listener in listeners
        ]
        loop = asyncio.get_running_loop()

        def stop() -> None:
            for server in servers:
                server.exit()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop)

        async def run(server: _Server, listener: Listener) -> None:
            if listener.own_loop:
                # exit() wakes that loop from this one.
                await asyncio.to_thread(asyncio.run, server.serve())
            else:
                await server.serve()

        await asyncio.gather(*(run(s, listener) for s, listener in zip(servers, listeners, strict=True)))

    try:
        asyncio.run(main())
    finally:
        shutdown_tracing()  # spans still queued are exported, not dropped
