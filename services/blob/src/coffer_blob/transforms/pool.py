"""The CDN's transform workers: a fixed pool of processes, a bounded queue, one flight per variant.

A libvips call cannot be interrupted, so renders run in worker processes (``pebble``'s
``ProcessPool``): one past its time limit is killed and replaced, and the CDN's event loop
only awaits a future. At most ``workers + queue`` renders are admitted at once; the next
one is refused at once (503 with ``Retry-After``) rather than waiting, and a render that has
not finished ``timeout`` seconds after it was admitted (queue wait included) is cancelled
(its worker killed if it had started) and answered 503 too. Originals never touch the pool,
so they keep being served meanwhile.

Concurrent requests for one variant share its render (a flight per variant key, in this
process): it is computed once and every request is served the same stored bytes.

Workers are not forked from the CDN process (it runs threads and an event loop) but from a
fork server (``_context``), on the first transform, so a process that never transforms never
starts them.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import time
from concurrent.futures import CancelledError as FutureCancelled
from typing import TYPE_CHECKING

from opentelemetry import trace
from prometheus_client import Counter, Gauge, Histogram

from coffer_blob.config import Settings
from coffer_blob.transforms import worker
from coffer_kit.errors import CofferError, unavailable
from coffer_kit.transforms import Transform

if TYPE_CHECKING:  # imported with the workers, on the first transform (see _workers)
    from pebble import ProcessPool

log = logging.getLogger("coffer.blob.transforms")
tracer = trace.get_tracer("coffer.blob")

COMPUTED = Counter("coffer_transform_variants_computed_total", "Variants rendered and stored.")
CACHE_HITS = Counter(
    "coffer_transform_cache_hits_total", "Transformed requests served from a stored variant."
)
SHARED = Counter(
    "coffer_transform_shared_total",
    "Transformed requests that joined a render already running for their variant.",
)
QUEUE_DEPTH = Gauge("coffer_transform_queue_depth", "Renders admitted and not finished (running or waiting).")
REJECTED = Counter(
    "coffer_transform_rejections_total", "Transformed requests answered 503, by reason.", ["reason"]
)
REFUSED = Counter("coffer_transform_refusals_total", "Sources refused (415, 422), by code.", ["code"])
DURATION = Histogram(
    "coffer_transform_duration_seconds",
    "Time from admitting a render to its end (queue wait included), by outcome.",
    ["outcome"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
_REJECTED_FULL = REJECTED.labels("queue_full")
_REJECTED_TIMEOUT = REJECTED.labels("timeout")
# Refused sources remembered per CDN process (a dict: past this it starts afresh).
REFUSALS_KEPT = 10_000
# Seconds a client is told to wait after a 503: about one render.
RETRY_AFTER = 2


def _context() -> multiprocessing.context.BaseContext:
    """Workers come from a fork server that has imported blob's code once: a replacement for
    a killed worker is a fork (milliseconds), not a new interpreter importing everything
    (3.5 s on a loaded 2-core machine, which a first request would wait for). libvips itself
    is loaded by each worker (``worker.init``), never before a fork."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["coffer_blob.transforms.worker"])
    return context


class TransformPool:
    """The worker pool of one CDN process (made by its lifespan, closed with it)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.admitted = 0
        self._pool: ProcessPool | None = None
        self._flights: dict[str, asyncio.Future[worker.Outcome]] = {}
        # Sources a worker refused (415, 422), by key: keys never change content, so asking
        # again would only read the whole source again (up to 100 MiB) to refuse it again.
        self._refused: dict[str, worker.Outcome] = {}

    @property
    def capacity(self) -> int:
        return self.settings.cdn_transform_workers + self.settings.cdn_transform_queue

    def _workers(self) -> ProcessPool:
        if self._pool is None:
            # pebble is imported here, not at start: a CDN that never transforms keeps its
            # 0.6 MiB of idle RSS.
            from pebble import ProcessPool

            self._pool = ProcessPool(
                max_workers=self.settings.cdn_transform_workers,
                initializer=worker.init,
                initargs=(self.settings, {k: v for k, v in os.environ.items() if k.startswith("AWS_")}),
                context=_context(),
            )
        return self._pool

    async def render(
        self, key: str, variant_key: str, transform: Transform, *, private: bool
    ) -> worker.Outcome:
        """The worker's outcome for this variant, joining a render of it already running."""
        refused = self._refused.get(key)
        if refused is not None:
            return refused
        flight = self._flights.get(variant_key)
        if flight is not None:
            SHARED.inc()
            return await asyncio.shield(flight)
        if self.admitted >= self.capacity:
            _REJECTED_FULL.inc()
            raise unavailable(
                "Every image transform worker is busy; try again shortly.", retry_after=RETRY_AFTER
            )
        # Admitted now, not when the task first runs: requests arriving in the same loop
        # iteration must see it.
        self.admitted += 1
        QUEUE_DEPTH.inc()
        flight = asyncio.ensure_future(self._run(key, variant_key, transform, private))
        self._flights[variant_key] = flight
        flight.add_done_callback(lambda _done: self._flights.pop(variant_key, None))
        return await asyncio.shield(flight)

    async def _run(self, key: str, variant_key: str, transform: Transform, private: bool) -> worker.Outcome:
        started = time.perf_counter()
        outcome = "error"
        timeout = self.settings.cdn_transform_timeout
        with tracer.start_as_current_span(
            "transform.render",
            attributes={"transform.spec": transform.canonical(), "transform.key": variant_key},
        ):
            try:
                future = self._workers().submit(
                    worker.run,
                    timeout,
                    key,
                    variant_key,
                    transform,
                    private,
                    self.settings.cdn_transform_max_pixels,
                )
                try:
                    # The worker's own limit counts from its start; this one from admission.
                    result = await asyncio.wait_for(asyncio.wrap_future(future), timeout)
                except (TimeoutError, FutureCancelled) as exc:
                    future.cancel()  # type: ignore[no-untyped-call]  # a running task's worker is killed
                    outcome = "timeout"
                    _REJECTED_TIMEOUT.inc()
                    raise unavailable(
                        f"The image transform took longer than {timeout:g} s.", retry_after=RETRY_AFTER
                    ) from exc
                outcome = str(result[0])
                if result[0] == "ok":
                    COMPUTED.inc()
                elif result[0] == "refused":
                    REFUSED.labels(result[2]).inc()
                    if len(self._refused) >= REFUSALS_KEPT:
                        self._refused.clear()
                    self._refused[key] = result
                return result
            except CofferError:
                raise
            except Exception as exc:
                log.exception("image transform of %s failed", key)
                message = "The image transform failed; try again shortly."
                raise unavailable(message, retry_after=RETRY_AFTER) from exc
            finally:
                self.admitted -= 1
                QUEUE_DEPTH.dec()
                DURATION.labels(outcome).observe(time.perf_counter() - started)

    def close(self) -> None:
        """Stop the workers (a render in progress is abandoned; its requests are gone too)."""
        if self._pool is not None:
            self._pool.stop()  # type: ignore[no-untyped-call]
            self._pool.join(timeout=10)
            self._pool = None
