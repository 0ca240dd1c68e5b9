"""What ``AsyncCoffer`` does off the event loop: disk reads and writes in worker threads, and its
sleeps. ``_sync_io`` has the same names for the generated ``Coffer`` (plain calls), so that the
client is written once (``_async.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")


async def run_sync(func: Callable[..., T], *args: Any) -> T:
    """``func(*args)`` in a worker thread."""
    return await anyio.to_thread.run_sync(func, *args)


async def sleep(seconds: float) -> None:
    await anyio.sleep(seconds)


async def iterate(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """A blocking iterator (disk reads) driven from worker threads."""
    done = object()
    while (chunk := await anyio.to_thread.run_sync(next, chunks, done)) is not done:
        yield chunk  # type: ignore[misc]
