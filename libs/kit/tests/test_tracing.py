"""The sampler's probe and the unsampled request's context (issue 28: a span the sampler is
known to drop is not made). Real SDK samplers and tracer providers, not installed globally."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator

import aiohttp
import httpx
import pytest
from aiohttp import web
from fastapi import FastAPI, Request
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    DEFAULT_OFF,
    DEFAULT_ON,
    ParentBasedTraceIdRatio,
    Sampler,
    TraceIdRatioBased,
)
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode

from coffer_kit import tracing
from coffer_testkit.testing import free_port


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    saved = (tracing._drops_under_unsampled, tracing._drops_roots, tracing._new_ids)
    yield
    tracing._drops_under_unsampled, tracing._drops_roots, tracing._new_ids = saved


@pytest.mark.parametrize(
    ("sampler", "under_unsampled", "roots"),
    [
        (ALWAYS_OFF, True, True),
        (DEFAULT_OFF, True, True),  # parentbased_always_off
        (DEFAULT_ON, True, False),  # parentbased_always_on, the default
        (ParentBasedTraceIdRatio(0.5), True, False),  # a root's decision depends on its trace id
        (ALWAYS_ON, False, False),
        (TraceIdRatioBased(0.5), False, False),
    ],
)
def test_the_probe_learns_what_the_sampler_always_drops(
    sampler: Sampler, under_unsampled: bool, roots: bool
) -> None:
    tracing._learn_sampler(TracerProvider(sampler=sampler))
    assert (tracing._drops_under_unsampled, tracing._drops_roots) == (under_unsampled, roots)


def scope(*headers: tuple[bytes, bytes]) -> dict[str, object]:
    return {"type": "http", "path": "/api/assets/x", "headers": [(b"host", b"edge"), *headers]}


def test_an_unsampled_caller_is_served_in_its_own_context() -> None:
    tracing._learn_sampler(TracerProvider(sampler=DEFAULT_ON))
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    context = tracing.unsampled_context(scope((b"traceparent", f"00-{trace_id}-{span_id}-00".encode())))
    assert context is not None
    carried = trace.get_current_span(context).get_span_context()
    assert (format(carried.trace_id, "032x"), format(carried.span_id, "016x")) == (trace_id, span_id)
    assert not carried.trace_flags.sampled


def test_a_sampled_caller_or_a_sampled_root_gets_a_span() -> None:
    tracing._learn_sampler(TracerProvider(sampler=DEFAULT_ON))
    sampled = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01".encode()
    assert tracing.unsampled_context(scope((b"traceparent", sampled))) is None
    assert tracing.unsampled_context(scope()) is None  # a root: the sampler samples it


def test_a_dropped_root_gets_a_new_unsampled_trace() -> None:
    tracing._learn_sampler(TracerProvider(sampler=ALWAYS_OFF))
    first, second = (tracing.unsampled_context(scope()) for _ in range(2))
    assert first is not None and second is not None
    one, two = (trace.get_current_span(c).get_span_context() for c in (first, second))
    assert one.is_valid and two.is_valid and one.trace_id != two.trace_id
    assert not one.trace_flags.sampled
    # A malformed traceparent is no parent: a new trace too.
    context = tracing.unsampled_context(scope((b"traceparent", b"00-zz-zz-00")))
    assert context is not None and trace.get_current_span(context).get_span_context().is_valid


def test_a_ratio_samplers_roots_are_left_to_the_tracer() -> None:
    tracing._learn_sampler(TracerProvider(sampler=ParentBasedTraceIdRatio(0.5)))
    assert tracing.unsampled_context(scope()) is None
    unsampled = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-00".encode()
    assert tracing.unsampled_context(scope((b"traceparent", unsampled))) is not None


@pytest.mark.anyio
@pytest.mark.parametrize("accept", [False, True])
async def test_a_public_listener_starts_its_own_trace_unless_told_to_accept_the_callers(
    accept: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Edge's API and blob's CDN take requests from anyone: a caller's sampled ``traceparent``
    had every request traced whatever the sampler (here: none), an unsampled one none, and
    either put Coffer's spans into a trace of the caller's choosing. They now drop the caller's
    context, ``baggage`` too, unless COFFER_TRACE_ACCEPT_CLIENT_CONTEXT is true (an ingress that
    starts traces). An internal listener takes its caller's (edge's) context as ever."""
    tracing._learn_sampler(TracerProvider(sampler=ALWAYS_OFF))
    monkeypatch.setattr(tracing, "_accept_client_context", accept)

    def app(cls: type[FastAPI]) -> FastAPI:
        made = cls(telemetry=tracing.telemetry())

        @made.get("/seen")
        def seen(request: Request) -> dict[str, object]:
            carried = trace.get_current_span().get_span_context()
            return {
                "trace": format(carried.trace_id, "032x"),
                "sampled": carried.trace_flags.sampled,
                "headers": sorted(h for h in request.headers if h.encode() in tracing.CLIENT_CONTEXT_HEADERS),
            }

        return made

    trace_id = secrets.token_hex(16)

    def sent(flags: str) -> dict[str, str]:
        traceparent = f"00-{trace_id}-{secrets.token_hex(8)}-{flags}"
        return {"traceparent": traceparent, "tracestate": "vendor=steer", "baggage": "user=someone"}

    async def ask(cls: type[FastAPI], headers: dict[str, str]) -> dict[str, object]:
        transport = httpx.ASGITransport(app=app(cls))
        async with httpx.AsyncClient(transport=transport, base_url="http://edge") as client:
            return (await client.get("/seen", headers=headers)).json()  # type: ignore[no-any-return]

    # (An unsampled caller's context is one this sampler serves without a tracer: it shows.)
    internal = await ask(tracing.TracedFastAPI, sent("00"))
    every = ["baggage", "traceparent", "tracestate"]
    assert internal == {"trace": trace_id, "sampled": False, "headers": every}
    if accept:
        assert await ask(tracing.PublicTracedFastAPI, sent("00")) == internal
        return
    for flags in ("00", "01"):  # a root of its own, which this sampler drops: nothing forced
        public = await ask(tracing.PublicTracedFastAPI, sent(flags))
        assert public["trace"] != trace_id and public["sampled"] is False and public["headers"] == []


# The client span of a call to another service (client_trace_config): a real aiohttp server on
# loopback, the span recorded by a provider of the test's own.


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def exported() -> Iterator[tuple[trace.Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test"), exporter
    provider.shutdown()


@contextlib.asynccontextmanager
async def upstream() -> AsyncIterator[tuple[str, list[str]]]:
    """An HTTP server answering 200 (``/ok``) or 500 (``/fail``), keeping each traceparent."""
    seen: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(request.headers.get("traceparent", ""))
        return web.Response(status=500 if request.path == "/fail" else 200, text="{}")

    app = web.Application()
    app.router.add_get("/{name}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


def _session(tracer: trace.Tracer) -> aiohttp.ClientSession:
    config = tracing.client_trace_config(url_filter=lambda url: tracing.redact_url(str(url)), tracer=tracer)
    return aiohttp.ClientSession(trace_configs=[config])


@pytest.mark.anyio
async def test_a_call_gets_a_client_span_whose_context_is_sent(exported) -> None:
    tracer, exporter = exported
    async with upstream() as (url, seen), _session(tracer) as session:
        with tracer.start_as_current_span("server") as server:
            async with session.get(f"{url}/ok?token=secret-upload-token&x=1") as response:
                assert response.status == 200
            async with session.get(f"{url}/fail") as response:
                assert response.status == 500
            # The caller's context is its own again once the call is answered.
            assert trace.get_current_span() is server
    ok, failed = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CLIENT]
    for span in (ok, failed):
        assert span.name == "GET"
        assert span.parent is not None and span.parent.span_id == server.get_span_context().span_id
        assert span.context.trace_id == server.get_span_context().trace_id
    # W3C traceparent: the client span is the callee's parent, sampled.
    assert [value.rsplit("-", 1)[0] for value in seen] == [
        f"00-{s.context.trace_id:032x}-{s.context.span_id:016x}" for s in (ok, failed)
    ]
    assert all(int(value.rsplit("-", 1)[1], 16) & 1 for value in seen)
    assert ok.attributes["http.method"] == "GET"
    assert ok.attributes["http.url"] == f"{url}/ok?token=REDACTED&x=1"
    assert ok.attributes["http.status_code"] == 200
    assert ok.status.status_code is StatusCode.UNSET
    assert failed.attributes["http.status_code"] == 500
    assert failed.status.status_code is StatusCode.ERROR


@pytest.mark.anyio
async def test_a_failed_call_ends_its_span_with_the_error(exported) -> None:
    tracer, exporter = exported
    async with _session(tracer) as session:
        with tracer.start_as_current_span("server") as server:
            with pytest.raises(aiohttp.ClientConnectionError):
                await session.get(f"http://127.0.0.1:{free_port()}/nobody")
            assert trace.get_current_span() is server
    (span,) = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CLIENT]
    assert span.status.status_code is StatusCode.ERROR
    assert [e.name for e in span.events] == ["exception"]


@pytest.mark.anyio
async def test_an_unsampled_caller_makes_no_client_span_and_passes_its_context_on(exported) -> None:
    tracer, exporter = exported
    tracing._learn_sampler(TracerProvider(sampler=DEFAULT_ON))
    caller = SpanContext(int(secrets.token_hex(16), 16), int(secrets.token_hex(8), 16), is_remote=True)
    token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(caller)))
    try:
        async with upstream() as (url, seen), _session(tracer) as session:
            response = await session.get(f"{url}/ok")
            assert response.status == 200
            response.release()
    finally:
        otel_context.detach(token)
    assert exporter.get_finished_spans() == ()
    assert seen == [f"00-{caller.trace_id:032x}-{caller.span_id:016x}-00"]
