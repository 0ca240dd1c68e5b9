"""Prometheus metrics: the request metrics every service shares, and ``/metrics``.

Works with several worker processes: when ``PROMETHEUS_MULTIPROC_DIR`` is set (as
prometheus-client's multiprocess mode requires), ``/metrics`` aggregates every process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from fastapi import APIRouter, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# Latency buckets from 5 ms to 5 minutes: small API calls up to slow 100 MiB uploads.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

HTTP_REQUESTS = Counter(
    "coffer_http_requests_total",
    "HTTP requests answered, by route template, method and status.",
    ["service", "route", "method", "status"],
)
HTTP_DURATION = Histogram(
    "coffer_http_request_duration_seconds",
    "Time to answer an HTTP request, by route template and method.",
    ["service", "route", "method"],
    buckets=LATENCY_BUCKETS,
)

# Retention of the bookkeeping (docs/operations.md, "Retention"): metadata's events, webhook
# attempts and deliveries and finished tus uploads, auth's audit entries.
RETENTION_PRUNED = Counter(
    "coffer_retention_pruned_total",
    "Bookkeeping rows deleted by retention, by kind (docs/operations.md, Retention).",
    ["kind"],
)


# Each label set's (counter, histogram) children, looked up once: labels() validates and
# locks on every call, which cost more than the observation itself (bench/results/journal.md,
# "Issue 16, round 6: the per-request cost, three hot paths").
_CHILDREN: dict[tuple[str, str, str, int], tuple[Counter, Histogram]] = {}


# The methods a request's metrics name; any other (the parser takes WebDAV's, ACL, MKCOL,
# PROPFIND and thirty more) is counted as _OTHER, as OpenTelemetry does: a client sending each
# to each route made a hundred series in a few requests.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def observe_request(service: str, route: str, method: str, status: int, seconds: float) -> None:
    if method not in _METHODS:
        method = "_OTHER"
    children = _CHILDREN.get((service, route, method, status))
    if children is None:
        children = _CHILDREN[service, route, method, status] = (
            HTTP_REQUESTS.labels(service, route, method, str(status)),
            HTTP_DURATION.labels(service, route, method),
        )
    children[0].inc()
    children[1].observe(seconds)


# Scrape-time gauges by name; in multiprocess mode they are asked directly (they read shared
# state such as the database, so the scraped worker's answer is everyone's).
_GAUGES: dict[str, Collector] = {}


def _registry() -> CollectorRegistry:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        for gauge in _GAUGES.values():
            registry.register(gauge)
        return registry
    return REGISTRY


def metrics_router() -> APIRouter:
    """``GET /metrics`` in the Prometheus text format. Mount it on internal listeners only."""
    router = APIRouter(include_in_schema=False)

    @router.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(_registry()), media_type=CONTENT_TYPE_LATEST)

    return router


class GaugeCollector(Collector):
    """A gauge family computed at scrape time (pool use, backlogs), registered once."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labels: list[str],
        read: Callable[[], Iterable[tuple[list[str], float]]],
    ) -> None:
        self.name, self.documentation, self.labels, self.read = name, documentation, labels, read

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=self.labels)
        for label_values, value in self.read():
            family.add_metric(label_values, value)
        yield family


def register_gauge(
    name: str, documentation: str, labels: list[str], read: Callable[[], Iterable[tuple[list[str], float]]]
) -> None:
    """Register (or replace, e.g. when an app is rebuilt in tests) a scrape-time gauge."""
    existing = _GAUGES.pop(name, None)
    if existing is not None:
        REGISTRY.unregister(existing)
    _GAUGES[name] = GaugeCollector(name, documentation, labels, read)
    REGISTRY.register(_GAUGES[name])


def register_pool_gauge(service: str, engine_of: Callable[[], object]) -> None:
    """``coffer_db_pool_connections{service,state}``: checked-out and idle pooled connections."""

    def read() -> Iterable[tuple[list[str], float]]:
        pool = getattr(engine_of(), "pool", None)
        if pool is None or not hasattr(pool, "checkedout"):
            return []
        return [([service, "in_use"], pool.checkedout()), ([service, "idle"], pool.checkedin())]

    register_gauge(
        "coffer_db_pool_connections",
        "Database connections in the pool, by state.",
        ["service", "state"],
        read,
    )
