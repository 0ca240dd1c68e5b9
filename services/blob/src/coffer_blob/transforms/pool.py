"""The CDN's transform workers: a fixed pool of processes, a bounded queue shared fairly
between organizations, one flight per variant.

A libvips call cannot be interrupted, so renders run in worker processes (``pebble``'s
``ProcessPool``): one past its time limit is killed and replaced, and the CDN's event loop
only awaits a future. Each worker has a hard memory limit the kernel enforces
(``worker.init``); one that dies (a library aborting on a refused allocation, a crash) is
replaced, and its request is a 422 ``image_too_large``, remembered for the source.

At most ``workers + queue`` renders are admitted at once, and at most half of that for one
organization (the first segment of a key); the next one is refused at once (503 with
``Retry-After``) rather than waiting. A render that has not finished ``timeout`` seconds after
it was admitted (queue wait included) is cancelled (its worker killed if it had started) and
answered 503 too. Admitted renders wait for a worker here, not in the pool's own queue:
free workers go to the waiting organizations in turn, and one organization runs on at most
``workers - 1`` of them at once (when there are two or more), so one organization's slow
sources can neither hold every worker nor make another's new variants wait behind its queue.
Originals never touch the pool, so they keep being served meanwhile.

Sources a worker refused (415, 422) are remembered, and so, for ``SLOW_KEPT_SECONDS``, are
variants whose render ran out of time on its worker (half the time limit or more on the
worker, not in the queue): asking again answers at once, without a worker. A variant, not its
source: a source too slow to render at 4000 pixels may be quick to shrink on load to a
thumbnail, and a source's variants on public URLs are its presets (at most 64 variants).

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
from collections import Counter as Tally
from collections import deque
from concurrent.futures import CancelledError as FutureCancelled
from typing import TYPE_CHECKING

from opentelemetry import trace
from prometheus_client import Counter, Gauge, Histogram

from coffer_blob.config import Settings
from coffer_blob.transforms import worker
from coffer_blob.transforms.limits import Limits
from coffer_kit.contract.errors import unavailable
from coffer_kit.contract.transforms import Transform

if TYPE_CHECKING:  # imported with the workers, on the first transform (see _workers)
    from pebble import ProcessPool

log = logging.getLogger("coffer.blob.transforms")
tracer = trace.get_tracer("coffer.blob")

COMPUTED = Counter("coffer_transform_variants_computed_total", "Variants rendered and stored.")
EVICTED = Counter(
    "coffer_transform_variants_evicted_total",
    "Kept variants deleted to make room for a new one of the same asset (at most 64 kept each, "
    "within 8 times the source's bytes).",
)
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
# How long a source whose render ran out of time is answered 503 at once (it would again).
SLOW_KEPT_SECONDS = 600


def _context() -> multiprocessing.context.BaseContext:
    """Workers come from a fork server that has imported blob's code once: a replacement for
    a killed worker is a fork (milliseconds), not a new interpreter importing everything
    (3.5 s on a loaded 2-core machine, which a first request would wait for). libvips itself
    is loaded by each worker (``worker.init``), never before a fork."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["coffer_blob.transforms.worker"])
    return context


# How long image facts (issue 50) wait for a worker and the pool's start before answering 503.
FACTS_WAIT_SECONDS = 60.0


class TransformPool:
    """The worker pool of one CDN process (made by its lifespan, closed with it)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.limits = Limits.of(settings)
        self.admitted = 0
        self.running = 0
        self._admitted_by_org: Tally[str] = Tally()
        self._running_by_org: Tally[str] = Tally()
        # Admitted renders waiting for a worker, by organization, and the organizations'
        # turns (who is served next when a worker frees up).
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}
        self._turns: deque[str] = deque()
        self._pool: ProcessPool | None = None
        self._flights: dict[str, asyncio.Future[worker.Outcome]] = {}
        # Sources a worker refused (415, 422), by key: keys never change content, so asking
        # again would only read the whole source again (up to 100 MiB) to refuse it again.
        self._refused: dict[str, worker.Outcome] = {}
        # Variants whose render ran out of time on its worker, by variant key: until when.
        self._slow: dict[str, float] = {}
        # Done once the pool's first worker (or a killed one's replacement) has started: that
        # is not a render's time.
        self._started: asyncio.Future[None] | None = None

    @property
    def capacity(self) -> int:
        return self.settings.cdn_transform_workers + self.settings.cdn_transform_queue

    @property
    def org_capacity(self) -> int:
        """Renders one organization may have admitted at once."""
        return max(1, self.capacity // 2)

    @property
    def org_workers(self) -> int:
        """Workers one organization may hold at once: all but one, so another always finds one."""
        return max(1, self.settings.cdn_transform_workers - 1)

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

    def remembered(self, key: str, variant_key: str) -> worker.Outcome | None:
        """A refusal remembered for this source (or 503 for a variant that ran out of time
        lately): the CDN asks before reading anything more of the source."""
        refused = self._refused.get(key)
        if refused is not None:
            return refused
        slow_until = self._slow.get(variant_key)
        if slow_until is not None:
            left = slow_until - time.monotonic()
            if left > 0:
                _REJECTED_TIMEOUT.inc()
                raise unavailable(
                    "Transforming this image took longer than "
                    f"{self.settings.cdn_transform_timeout:g} s; it is not tried again for a while.",
                    retry_after=int(left) + 1,
                )
            del self._slow[variant_key]
        return None

    async def render(
        self, key: str, variant_key: str, transform: Transform, *, private: bool
    ) -> worker.Outcome:
        """The worker's outcome for this variant, joining a render of it already running."""
        remembered = self.remembered(key, variant_key)
        if remembered is not None:
            return remembered
        flight = self._flights.get(variant_key)
        if flight is not None:
            SHARED.inc()
            return await asyncio.shield(flight)
        org = key.split("/", 1)[0]
        if self.admitted >= self.capacity or self._admitted_by_org[org] >= self.org_capacity:
            _REJECTED_FULL.inc()
            raise unavailable(
                "Every image transform worker is busy; try again shortly.", retry_after=RETRY_AFTER
            )
        # Admitted now, not when the task first runs: requests arriving in the same loop
        # iteration must see it.
        self.admitted += 1
        self._admitted_by_org[org] += 1
        QUEUE_DEPTH.inc()
        flight = asyncio.ensure_future(self._run(key, org, variant_key, transform, private))
        self._flights[variant_key] = flight
        flight.add_done_callback(lambda _done: self._flights.pop(variant_key, None))
        return await asyncio.shield(flight)

    async def _worker_slot(self, org: str) -> None:
        """Wait for this organization's turn at a free worker (then it holds one: ``_release``)."""
        free = self.running < self.settings.cdn_transform_workers
        if free and not self._waiting and self._running_by_org[org] < self.org_workers:
            self._hold(org)
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(org, deque()).append(turn)
        if org not in self._turns:
            self._turns.append(org)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # given a worker as it was cancelled
                self._release(org)
            turn.cancel()
            self._dispatch()
            raise

    def _hold(self, org: str) -> None:
        self.running += 1
        self._running_by_org[org] += 1

    def _release(self, org: str) -> None:
        self.running -= 1
        self._running_by_org[org] -= 1
        if self._running_by_org[org] <= 0:
            del self._running_by_org[org]
        self._dispatch()

    def _dispatch(self) -> None:
        """Give free workers to waiting organizations, one each in turn."""
        progress = True
        while progress and self.running < self.settings.cdn_transform_workers:
            progress = False
            for org in list(self._turns):
                if self.running >= self.settings.cdn_transform_workers:
                    return
                queue = self._waiting.get(org)
                while queue and queue[0].done():  # cancelled while waiting
                    queue.popleft()
                if not queue:
                    self._waiting.pop(org, None)
                    self._turns.remove(org)
                    continue
                if self._running_by_org[org] >= self.org_workers:
                    continue
                self._hold(org)
                queue.popleft().set_result(None)
                progress = True
                self._turns.remove(org)  # to the back of the line
                if queue:
                    self._turns.append(org)
                else:
                    del self._waiting[org]

    async def _run(
        self, key: str, org: str, variant_key: str, transform: Transform, private: bool
    ) -> worker.Outcome:
        started = time.perf_counter()
        outcome = "error"
        timeout = self.settings.cdn_transform_timeout
        with tracer.start_as_current_span(
            "transform.render",
            attributes={"transform.spec": transform.canonical(), "transform.key": variant_key},
        ):
            try:
                result = await self._on_worker(key, org, variant_key, transform, private, started + timeout)
            except TimeoutError as exc:
                outcome = "timeout"
                _REJECTED_TIMEOUT.inc()
                raise unavailable(
                    f"The image transform took longer than {timeout:g} s.", retry_after=RETRY_AFTER
                ) from exc
            except Exception as exc:
                log.exception("image transform of %s failed", key)
                message = "The image transform failed; try again shortly."
                raise unavailable(message, retry_after=RETRY_AFTER) from exc
            finally:
                self.admitted -= 1
                self._admitted_by_org[org] -= 1
                if self._admitted_by_org[org] <= 0:
                    del self._admitted_by_org[org]
                QUEUE_DEPTH.dec()
                DURATION.labels(outcome).observe(time.perf_counter() - started)
        outcome = str(result[0])
        if result[0] == "ok":
            COMPUTED.inc()
            EVICTED.inc(result[4])
        elif result[0] == "refused":
            REFUSED.labels(result[2]).inc()
            if len(self._refused) >= REFUSALS_KEPT:
                self._refused.clear()
            self._refused[key] = result
        elif result[0] == "oversize":  # this variant's, not its source's: not remembered
            REFUSED.labels(result[2]).inc()
        return result

    async def _on_worker(
        self, key: str, org: str, variant_key: str, transform: Transform, private: bool, deadline: float
    ) -> worker.Outcome:
        """Wait for a worker, then render on it; TimeoutError at ``deadline`` (perf_counter)."""
        await asyncio.wait_for(self._worker_slot(org), deadline - time.perf_counter())
        try:
            # Refused while this one waited (another variant of the source, asked at once)?
            remembered = self.remembered(key, variant_key)
            if remembered is not None:
                return remembered
            await asyncio.wait_for(asyncio.shield(self._start()), deadline - time.perf_counter())
            began = time.perf_counter()
            left = deadline - began
            if left <= 0:
                raise TimeoutError
            future = self._workers().submit(worker.run, left, key, variant_key, transform, private)
            try:
                # The worker's own limit counts from its start; this one from admission.
                result: worker.Outcome = await asyncio.wait_for(asyncio.wrap_future(future), left)
            except (TimeoutError, FutureCancelled):
                future.cancel()  # type: ignore[no-untyped-call]  # a running task's worker is killed
                self._started = None  # the next render waits for its replacement's start first
                if time.perf_counter() - began >= self.settings.cdn_transform_timeout / 2:
                    # Its own render, not the queue, took the time: it would again.
                    if len(self._slow) >= REFUSALS_KEPT:
                        self._slow.clear()
                    self._slow[variant_key] = time.monotonic() + SLOW_KEPT_SECONDS
                raise TimeoutError from None
            except _process_expired() as exc:
                # The worker died under this render: its memory limit (a library that aborts
                # when an allocation is refused) or a crash in a codec. The source caused it.
                log.warning("image transform of %s: its worker died (%s)", key, exc)
                error = self.limits.exceeded()
                return ("refused", error.status, error.code, error.message, error.details)
            return result
        finally:
            self._release(org)

    async def facts(self, key: str) -> worker.Outcome:
        """An image's facts (issue 50), computed on a worker with a render's bounds: its turn at
        a worker (the asset's organization's, as renders), its time limit, its memory limit (a
        worker that dies under it answers ``("none",)``)."""
        org = key.split("/", 1)[0]
        try:
            # Waiting for a worker (and for the pool's start) is not the computation's time;
            # past FACTS_WAIT_SECONDS the caller tries later (503).
            await asyncio.wait_for(self._worker_slot(org), FACTS_WAIT_SECONDS)
        except TimeoutError:
            raise unavailable(
                "Every image worker is busy; try again shortly.", retry_after=RETRY_AFTER
            ) from None
        try:
            try:
                await asyncio.wait_for(asyncio.shield(self._start()), FACTS_WAIT_SECONDS)
            except TimeoutError:
                raise unavailable("The image workers are starting.", retry_after=RETRY_AFTER) from None
            left = self.settings.cdn_transform_timeout
            future = self._workers().submit(worker.facts, left, key)
            try:
                result: worker.Outcome = await asyncio.wait_for(asyncio.wrap_future(future), left)
            except (TimeoutError, FutureCancelled):
                future.cancel()  # type: ignore[no-untyped-call]
                self._started = None
                return ("none",)
            except _process_expired():
                return ("none",)
            return result
        finally:
            self._release(org)

    def _start(self) -> asyncio.Future[None]:
        """The pool's start (or a killed worker's replacement): a worker forked and initialised."""
        if self._started is None or (self._started.done() and self._started.exception() is not None):
            ping = self._workers().submit(worker.ping, None)
            self._started = asyncio.ensure_future(_discard(asyncio.wrap_future(ping)))
            # Its failure is each waiting render's (a 503); none may be waiting by then.
            self._started.add_done_callback(lambda done: done.cancelled() or done.exception())
        return self._started

    def close(self) -> None:
        """Stop the workers (a render in progress is abandoned; its requests are gone too)."""
        if self._started is not None:
            self._started.cancel()
            self._started = None
        if self._pool is not None:
            self._pool.stop()  # type: ignore[no-untyped-call]
            self._pool.join(timeout=10)
            self._pool = None


async def _discard(future: asyncio.Future[None]) -> None:
    await future


def _process_expired() -> type[Exception]:
    """pebble's exception for a worker that died (imported with the workers, see _workers)."""
    from pebble import ProcessExpired

    return ProcessExpired
