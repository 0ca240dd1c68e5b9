"""Tracing's CPU per request in one process, sampled beside unsampled (issue 28).

    uv run --frozen --no-sync python bench/trace_probe.py [--requests 3000] [--rounds 3] [--profile]

An app made by ``coffer_kit.app.base_app`` with tracing on (exporting to bench/otlp_sink.py,
its own process) serves edge's shape of ``GET /api/assets/:id``: one call to another process
(bench/reference_app.py) through ``coffer_kit.internal.internal_client``, its JSON answered.
The app is called over ASGI in a loop, one request at a time, with a sampled and an unsampled
``traceparent`` alternating in rounds; the figure is this process's CPU time (the exporter's
thread included) per request, after the spans of each round are exported. ``--profile``
prints cProfile's top functions of one sampled and one unsampled round.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import io
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from coffer_testkit.testing import free_port, wait_healthy

BENCH = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/trace_probe.py", description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument(
        "--hand-server",
        action="store_true",
        help="the server span made by a hand-written ASGI layer, not FastAPI's telemetry (an experiment)",
    )
    parser.add_argument("--no-call", action="store_true", help="the route answers without calling out")
    parser.add_argument("--gc-freeze", action="store_true", help="gc.freeze() once the app has started")
    parser.add_argument("--gc-threshold", type=int, default=0, help="gc.set_threshold(N) (generation 0)")
    parser.add_argument(
        "--heap",
        action="store_true",
        help="import edge's and metadata's apps first, so the garbage collector walks a service's heap",
    )
    args = parser.parse_args(argv)

    sink_port, upstream_port = free_port(), free_port()
    sink = subprocess.Popen([sys.executable, str(BENCH / "otlp_sink.py"), str(sink_port)])
    upstream = subprocess.Popen([sys.executable, str(BENCH / "reference_app.py"), str(upstream_port)])
    try:
        wait_healthy(f"http://127.0.0.1:{upstream_port}/healthz")
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{sink_port}"
        os.environ.setdefault("OTEL_TRACES_SAMPLER", "parentbased_always_on")
        asyncio.run(probe(args, f"http://127.0.0.1:{upstream_port}"))
    finally:
        for proc in (sink, upstream):
            proc.terminate()
            proc.wait()
    return 0


async def probe(args: argparse.Namespace, upstream: str) -> None:
    from coffer_kit.app import base_app
    from coffer_kit.internal import internal_client
    from coffer_kit.tracing import shutdown_tracing, tracing_enabled

    if args.hand_server:
        import coffer_kit.app

        coffer_kit.app.app_class = hand_server_app  # type: ignore[assignment]
    if args.heap:
        import coffer_edge.main  # noqa: F401
        import coffer_metadata.main  # noqa: F401

    gc_seconds = {True: 0.0, False: 0.0}
    gc_by_generation = {True: [0.0, 0.0, 0.0], False: [0.0, 0.0, 0.0]}
    gc_runs: dict[bool, list[int]] = {True: [0, 0, 0], False: [0, 0, 0]}
    gc_state: dict[str, Any] = {"sampled": None, "started": 0.0}

    def on_gc(phase: str, info: dict[str, int]) -> None:
        mode = gc_state["sampled"]
        if mode is None:
            return
        if phase == "start":
            gc_state["started"] = time.process_time()
        else:
            spent = time.process_time() - gc_state["started"]
            gc_seconds[mode] += spent
            gc_by_generation[mode][info["generation"]] += spent
            gc_runs[mode][info["generation"]] += 1

    gc.callbacks.append(on_gc)
    app = base_app("coffer-probe")
    assert tracing_enabled()
    client = internal_client(upstream, "token")

    @app.get("/api/assets/{asset_id}")
    async def get_asset(asset_id: str) -> Any:
        if args.no_call:
            return {"id": asset_id}
        async with client.session.get(client.url(f"/api/assets/{asset_id}")) as response:
            return await response.json()

    asset = "ast_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9"

    async def one(traceparent: bytes) -> None:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": f"/api/assets/{asset}",
            "raw_path": f"/api/assets/{asset}".encode(),
            "root_path": "",
            "query_string": b"",
            "headers": [
                (b"host", b"127.0.0.1:8080"),
                (b"user-agent", b"wrk"),
                (b"x-api-key", b"cof_org_x"),
                (b"traceparent", traceparent),
            ],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8080),
            "state": {},
        }
        status = 0

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]

        await app(scope, receive, send)
        assert status == 200, status

    def parent(sampled: bool) -> bytes:
        return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-{'01' if sampled else '00'}".encode()

    async def round_of(sampled: bool, n: int, profiler: Any = None) -> float:
        from opentelemetry import trace

        provider: Any = trace.get_tracer_provider()
        provider.force_flush()
        gc_state["sampled"] = sampled
        started = time.process_time()
        if profiler:
            profiler.enable()
        for _ in range(n):
            await one(parent(sampled))
        provider.force_flush()  # this round's spans exported, in this round's time
        gc_state["sampled"] = None
        if profiler:
            profiler.disable()
        return 1e6 * (time.process_time() - started) / n

    async with app.router.lifespan_context(app):
        for sampled in (True, False):
            await round_of(sampled, 300)  # warm-up
        if args.gc_threshold:
            gc.set_threshold(args.gc_threshold, *gc.get_threshold()[1:])
        if args.gc_freeze:
            gc.collect()
            gc.freeze()
        results: dict[bool, list[float]] = {True: [], False: []}
        gc_seconds[True] = gc_seconds[False] = 0.0
        gc_runs[True], gc_runs[False] = [0, 0, 0], [0, 0, 0]
        gc_by_generation[True], gc_by_generation[False] = [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]
        for _ in range(args.rounds):
            for sampled in (True, False):
                results[sampled].append(await round_of(sampled, args.requests))
        for sampled, label in ((True, "sampled"), (False, "unsampled")):
            values = ", ".join(f"{v:.0f}" for v in results[sampled])
            print(f"{label:>9}: {values} µs CPU per request")
        extra = [s - u for s, u in zip(results[True], results[False], strict=True)]
        print(f"    extra: {', '.join(f'{v:.0f}' for v in extra)} µs per traced request")
        for sampled, label in ((True, "sampled"), (False, "unsampled")):
            n = args.rounds * args.requests
            print(
                f"{label:>9}: garbage collection {1e6 * gc_seconds[sampled] / n:.0f} µs per request "
                f"(collections of generations 0/1/2: {'/'.join(map(str, gc_runs[sampled]))}, µs per "
                f"request each: {'/'.join(f'{1e6 * t / n:.0f}' for t in gc_by_generation[sampled])})"
            )
        if args.profile:
            # bench/profile.py (first on the path) would shadow the standard library's profile
            # module, which cProfile imports.
            sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH]
            import cProfile
            import pstats

            for sampled, label in ((True, "sampled"), (False, "unsampled")):
                profiler = cProfile.Profile(time.process_time)
                await round_of(sampled, args.requests, profiler)
                out = io.StringIO()
                stats = pstats.Stats(profiler, stream=out)
                stats.sort_stats("tottime").print_stats(args.top)
                print(f"==== {label}: tottime\n{out.getvalue()}")
                out = io.StringIO()
                stats = pstats.Stats(profiler, stream=out)
                stats.sort_stats("cumtime").print_stats(args.top)
                print(f"==== {label}: cumtime\n{out.getvalue()}")
    await client.close()
    shutdown_tracing()


def hand_server_app(*, public: bool = False) -> type:  # (app_class's signature)
    """An experiment, not Coffer's code: the server span of a sampled request made around the
    app by hand (the attributes FastAPI's telemetry records but ``server.*`` and
    ``network.protocol.version``; named after ``scope["route"]``, which ignores mounts),
    FastAPI's telemetry skipped. Measures what FastAPI's telemetry costs around its span."""
    from fastapi import FastAPI
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, StatusCode

    from coffer_kit import tracing

    tracer = trace.get_tracer("coffer.probe")

    class HandServer(tracing.TracedFastAPI):
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if (
                scope["type"] != "http"
                or "fastapi.telemetry" in scope
                or scope["path"] in tracing.EXCLUDED_PATHS
                or tracing.unsampled_context(scope) is not None
            ):
                await super().__call__(scope, receive, send)
                return
            parent = propagate.extract(scope.get("headers") or [], getter=tracing._SCOPE_HEADERS)
            method = scope["method"]
            attributes = {
                "http.request.method": method,
                "url.scheme": scope.get("scheme", "http"),
                "url.path": tracing.redact_url(scope["path"]),
            }
            if scope.get("query_string"):
                attributes["url.query"] = tracing.redact_url(scope["query_string"].decode("latin-1"))
            span = tracer.start_span(method, context=parent, kind=SpanKind.SERVER, attributes=attributes)
            status = 0

            async def send_status(message: Any) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                await send(message)

            scope["fastapi.telemetry"] = None
            token = otel_context.attach(trace.set_span_in_context(span, parent))
            try:
                await FastAPI.__call__(self, scope, receive, send_status)
            except BaseException as exc:
                span.set_attribute("error.type", type(exc).__qualname__)
                raise
            finally:
                otel_context.detach(token)
                scope.pop("fastapi.telemetry", None)
                route = getattr(scope.get("route"), "path", None)
                if route:
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.route", route)
                span.set_attribute("http.response.status_code", status)
                if not status or status >= 500:
                    span.set_status(StatusCode.ERROR)
                span.end()

    return HandServer


if __name__ == "__main__":
    sys.exit(main())
