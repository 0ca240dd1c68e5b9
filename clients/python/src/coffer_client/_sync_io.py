"""``_async_io``'s names for the synchronous client, generated from ``_async.py``: a plain call,
``time.sleep``, and the iterator itself."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(func: Callable[..., T], *args: Any) -> T:
    return func(*args)


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def iterate(chunks: Iterator[bytes]) -> Iterator[bytes]:
    return chunks
