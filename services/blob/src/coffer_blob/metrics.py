"""blob's own metrics and trace spans: every storage operation, and the bytes the CDN sends.

The driver is wrapped once (``instrumented``), so both drivers report alike and the drivers
themselves stay free of observability code. Spans are made in the worker thread that runs
the operation; anyio copies the request's context there, so they join the request's trace.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any

from opentelemetry import trace
from prometheus_client import Counter, Histogram

from coffer_blob.storage.base import ObjectInfo, Reader, Resumable, Storage, StoredObject, Writer
from coffer_kit.contract.wire import HoldReason
from coffer_kit.metrics import LATENCY_BUCKETS
from coffer_kit.tracing import tracing_enabled

tracer = trace.get_tracer("coffer.blob")

STORAGE_OPERATION = Histogram(
    "coffer_storage_operation_duration_seconds",
    "Time of one storage driver operation, by driver, operation and outcome.",
    ["driver", "operation", "outcome"],
    buckets=LATENCY_BUCKETS,
)
DOWNLOAD_BYTES = Counter(
    "coffer_download_bytes_total",
    "Bytes of objects sent by the CDN host, by access (public or signed).",
    ["access"],
)


# Each (driver, operation, outcome) child, looked up once: labels() validates and locks per call.
_TIMERS: dict[tuple[str, str, str], Histogram] = {}


def _timer(driver: str, operation: str, outcome: str) -> Histogram:
    timer = _TIMERS.get((driver, operation, outcome))
    if timer is None:
        timer = _TIMERS[driver, operation, outcome] = STORAGE_OPERATION.labels(driver, operation, outcome)
    return timer


class _operation:
    """Time one driver call into its histogram (outcome ok or error) and, with tracing on,
    wrap it in a span. A class rather than a generator: it runs on every download."""

    __slots__ = ("driver", "operation", "span", "started")

    def __init__(self, driver: str, operation: str, *, span: bool = True) -> None:
        self.driver = driver
        self.operation = operation
        # Without a tracer provider the span would be a no-op that still costs a context switch.
        self.span: AbstractContextManager[object] | None = (
            tracer.start_as_current_span(f"storage.{operation}", attributes={"storage.driver": driver})
            if span and tracing_enabled()
            else None
        )
        self.started = 0.0

    def __enter__(self) -> None:
        self.started = time.perf_counter()
        if self.span is not None:
            self.span.__enter__()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self.span is not None:
                self.span.__exit__(kind, error, tb)
        finally:
            outcome = "ok" if kind is None else "error"
            _timer(self.driver, self.operation, outcome).observe(time.perf_counter() - self.started)


class InstrumentedStorage:
    """A driver that times and traces every call of the driver it wraps."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.name = inner.name
        self.inline_read_bytes = inner.inline_read_bytes

    def open_writer(self, key: str) -> Writer:
        with _operation(self.name, "open_writer"):
            return _InstrumentedWriter(self.inner.open_writer(key), self.name)

    def open_resumable(self, key: str, upload_id: str, offset: int, state: dict[str, Any]) -> Resumable:
        with _operation(self.name, "open_resumable"):
            return _InstrumentedResumable(self.inner.open_resumable(key, upload_id, offset, state), self.name)

    def stat(self, key: str) -> ObjectInfo | None:
        with _operation(self.name, "stat"):
            return self.inner.stat(key)

    def open_reader(self, key: str, start: int = 0, end: int | None = None) -> Reader | None:
        with _operation(self.name, "open_reader"):
            return self.inner.open_reader(key, start, end)

    def read_small(self, key: str, limit: int) -> tuple[ObjectInfo, bytes | None] | None:
        with _operation(self.name, "read_small"):
            return self.inner.read_small(key, limit)

    def delete(self, key: str) -> None:
        with _operation(self.name, "delete"):
            self.inner.delete(key)

    def set_private(self, key: str, private: bool) -> bool:
        with _operation(self.name, "set_private"):
            return self.inner.set_private(key, private)

    def set_held(self, key: str, held: bool, reason: HoldReason = "scan") -> bool:
        with _operation(self.name, "set_held"):
            return self.inner.set_held(key, held, reason)

    def delete_prefix(self, prefix: str) -> None:
        with _operation(self.name, "delete_prefix"):
            self.inner.delete_prefix(prefix)

    def filenames(self, prefix: str, limit: int) -> list[str]:
        with _operation(self.name, "filenames"):
            return self.inner.filenames(prefix, limit)

    def sizes(self, prefix: str, limit: int) -> list[tuple[str, int]]:
        with _operation(self.name, "filenames"):
            return self.inner.sizes(prefix, limit)

    def inventory(self) -> Iterator[StoredObject]:
        return self.inner.inventory()  # (the scrub's walk, timed by the scrub itself)

    def check(self) -> None:
        # Readiness probes are neither traced (like /readyz itself) nor worth a span each.
        with _operation(self.name, "check", span=False):
            self.inner.check()

    def close(self) -> None:
        self.inner.close()


class _InstrumentedWriter:
    def __init__(self, inner: Writer, driver: str) -> None:
        self.inner = inner
        self.driver = driver

    def write(self, chunk: bytes) -> None:
        # One observation per batch (about 1 MiB), no span: a 100 MiB file is one trace, not 100.
        with _operation(self.driver, "write", span=False):
            self.inner.write(chunk)

    def write_many(self, chunks: Sequence[bytes]) -> None:
        with _operation(self.driver, "write", span=False):
            self.inner.write_many(chunks)

    def commit(
        self, *, content_type: str, sha256: str, private: bool = False, held: bool = False
    ) -> ObjectInfo:
        with _operation(self.driver, "commit"):
            return self.inner.commit(content_type=content_type, sha256=sha256, private=private, held=held)

    def abort(self) -> None:
        with _operation(self.driver, "abort"):
            self.inner.abort()


class _InstrumentedResumable(_InstrumentedWriter):
    inner: Resumable

    def checkpoint(self, offset: int) -> dict[str, Any]:
        with _operation(self.driver, "checkpoint"):
            return self.inner.checkpoint(offset)
