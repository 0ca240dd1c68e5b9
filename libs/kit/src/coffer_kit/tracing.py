"""OpenTelemetry traces, configured only by the standard ``OTEL_*`` variables.

Off (nothing instrumented, no cost on the hot path) unless ``OTEL_EXPORTER_OTLP_ENDPOINT``
or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set. Exports OTLP over HTTP/protobuf.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, StatusCode, TraceFlags
from starlette.types import Receive, Scope, Send

if TYPE_CHECKING:  # the SDK is imported only once tracing is on: untraced processes never load it
    import aiohttp
    from fastapi.telemetry import TelemetryConfig
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import Span as SdkSpan
    from opentelemetry.sdk.trace import SpanProcessor

log = logging.getLogger("coffer.tracing")
_enabled = False
# What a caller sends to join a trace, steer its sampling, or carry baggage along it (W3C Trace
# Context and Baggage). A public listener drops them unless told to accept them:
# COFFER_TRACE_ACCEPT_CLIENT_CONTEXT=true, read by setup_tracing (an ingress that starts traces).
CLIENT_CONTEXT_HEADERS = frozenset({b"traceparent", b"tracestate", b"baggage"})
ACCEPT_CLIENT_CONTEXT_ENV = "COFFER_TRACE_ACCEPT_CLIENT_CONTEXT"
_accept_client_context = False
# Probes and scrapes are not traced.
EXCLUDED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


def tracing_configured() -> bool:
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def setup_tracing(service: str) -> bool:
    """Install a tracer provider for ``coffer-<service>`` if an OTLP endpoint is configured."""
    global _enabled, _accept_client_context
    if _enabled or not tracing_configured() or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return _enabled
    _accept_client_context = os.environ.get(ACCEPT_CLIENT_CONTEXT_ENV, "").lower() == "true"
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL"
    )
    if protocol and protocol != "http/protobuf":
        log.warning("only OTLP http/protobuf is supported; exporting with it", extra={"protocol": protocol})
    os.environ.setdefault("OTEL_SERVICE_NAME", f"coffer-{service}")
    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; the sampler
    # comes from OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG.
    provider = TracerProvider(resource=Resource.create({}))
    provider.add_span_processor(_redactor())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _learn_sampler(provider)
    _enabled = True
    return True


def tracing_enabled() -> bool:
    return _enabled


# What the configured sampler decides whatever the trace id, learnt once (_learn_sampler):
# that it drops every span whose parent was not sampled (every parentbased_* sampler, and
# always_off), and that it drops every span without a parent (always_off,
# parentbased_always_off). Where the decision is known before a span is made, no span is made:
# the unsampled context is propagated as it is, and the attributes, the span and its context
# (FastAPI's server span, aiohttp's client span) are never built.
_drops_under_unsampled = False
_drops_roots = False
_new_ids: Any = None  # the provider's IdGenerator, for the trace id of an unsampled root


def _learn_sampler(provider: Any) -> None:
    """Probe the provider's sampler (its public ``should_sample``) with an unsampled parent,
    local and remote, and with none, under several trace ids: a sampler that drops them all
    (the standard ones do so whatever the trace id) gets the shortcut; any other (a ratio for
    roots, a custom one) makes every span as before."""
    global _drops_under_unsampled, _drops_roots, _new_ids
    from opentelemetry.sdk.trace.sampling import Decision
    from opentelemetry.trace import SpanKind

    sampler = provider.sampler
    trace_ids = (1, 2**63 - 1, 2**64, 2**128 - 1)

    def drops(parent: Any) -> bool:
        return all(
            sampler.should_sample(parent, trace_id, "GET", SpanKind.SERVER).decision is Decision.DROP
            for trace_id in trace_ids
            for _ in range(4)
        )

    unsampled = [
        trace.set_span_in_context(
            NonRecordingSpan(SpanContext(0xABC, 0xDEF, is_remote=remote, trace_flags=_UNSAMPLED))
        )
        for remote in (True, False)
    ]
    _drops_under_unsampled = all(drops(parent) for parent in unsampled)
    _drops_roots = drops(None)
    _new_ids = provider.id_generator


_UNSAMPLED = TraceFlags(TraceFlags.DEFAULT)


class _ScopeHeaders(Getter[list[tuple[bytes, bytes]]]):
    """Reads propagation headers straight from an ASGI scope's header list (names lowercase)."""

    def get(self, carrier: list[tuple[bytes, bytes]], key: str) -> list[str] | None:
        name = key.lower().encode("latin-1")
        values = [value.decode("latin-1") for header, value in carrier if header == name]
        if not values:
            return None
        return [",".join(values)] if name == b"baggage" else values  # as FastAPI's getter

    def keys(self, carrier: list[tuple[bytes, bytes]]) -> list[str]:
        return [header.decode("latin-1") for header, _ in carrier]


_SCOPE_HEADERS = _ScopeHeaders()


def unsampled_context(scope: Scope) -> Context | None:
    """The context to serve a request in when the sampler is known to drop its server span
    (its ``traceparent`` says not sampled, or it has none and roots are dropped): the incoming
    context, or a new unsampled trace in it, as the SDK's non-recording span would carry.
    None when a span may be recorded: FastAPI's telemetry makes it then."""
    parent = propagate.extract(scope.get("headers") or [], getter=_SCOPE_HEADERS)
    incoming = trace.get_current_span(parent).get_span_context()
    if incoming.is_valid:
        return parent if _drops_under_unsampled and not incoming.trace_flags.sampled else None
    if not _drops_roots:
        return None
    root = SpanContext(_new_ids.generate_trace_id(), _new_ids.generate_span_id(), False, _UNSAMPLED)
    return trace.set_span_in_context(NonRecordingSpan(root), parent)


class TracedFastAPI(FastAPI):
    """FastAPI with its telemetry skipped for a request whose span the sampler would drop.

    FastAPI 0.165's telemetry builds a server span's attributes (the Host header parsed, the
    query string re-encoded), extracts and attaches the context and wraps send and receive
    before its tracer asks the sampler; for a request that is not sampled, this serves it in
    its unsampled context instead (``"fastapi.telemetry"`` in the scope is FastAPI's own sign
    that telemetry is handled: a mounted app's), so propagation and log lines' trace ids are
    as before and only the span that would not be recorded is not made.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handled = "fastapi.telemetry" in scope  # a mounted app's request, or one seen already
        if scope["type"] == "http" and not handled and scope["path"] not in EXCLUDED_PATHS:
            context = unsampled_context(scope)
            if context is not None:
                scope["fastapi.telemetry"] = None
                token = otel_context.attach(context)
                try:
                    await super().__call__(scope, receive, send)
                finally:
                    otel_context.detach(token)
                    scope.pop("fastapi.telemetry", None)
                return
        await super().__call__(scope, receive, send)


class PublicTracedFastAPI(TracedFastAPI):
    """A public listener's app (edge's API and dashboard, blob's CDN): the caller's own trace
    context is dropped (CLIENT_CONTEXT_HEADERS), and each request starts a trace of Coffer's,
    sampled as the sampler decides for a root. Anyone could otherwise have every request traced
    whatever the sampler's ratio (a sampled ``traceparent``), or none (an unsampled one), put
    spans into a trace of their choosing, or send baggage along. An ingress that starts traces
    itself is trusted with COFFER_TRACE_ACCEPT_CLIENT_CONTEXT=true."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not _accept_client_context:
            headers = scope.get("headers") or []
            if any(name in CLIENT_CONTEXT_HEADERS for name, _ in headers):
                scope["headers"] = [(n, v) for n, v in headers if n not in CLIENT_CONTEXT_HEADERS]
        await super().__call__(scope, receive, send)


def app_class(*, public: bool = False) -> type[FastAPI]:
    """The FastAPI class a service's app is made from, with tracing on :class:`TracedFastAPI`,
    or :class:`PublicTracedFastAPI` for a public listener."""
    if not _enabled:
        return FastAPI
    return PublicTracedFastAPI if public else TracedFastAPI


def client_trace_config(
    url_filter: Callable[[Any], str], tracer: trace.Tracer | None = None
) -> aiohttp.TraceConfig:
    """A client span per call to another service, its context injected as W3C ``traceparent``
    (issue 28: what opentelemetry-instrumentation-aiohttp-client records for these calls, at
    about half its CPU). Under a parent that was not sampled, when the sampler drops such
    children, no span is made: the context is injected as it is, and nothing else runs.

    The span is the instrumentation's, with its attribute names (``http.method``, ``http.url``
    through ``url_filter``, ``http.status_code``; an error status for 4xx/5xx or an exception,
    recorded); what the instrumentation does besides, and Coffer never used, is left out:
    a duration histogram for a meter provider that is not configured, request and response
    headers copied into a dict for header capture that is off, the URL parsed again for
    ``server.address`` and ``server.port`` (not recorded under the default conventions) and
    its own credential redaction beside ``url_filter``'s. In process, edge's call to metadata
    costs less CPU traced this way than with the instrumentation beside the span itself
    (bench/trace_probe.py; bench/results/journal.md, "Issue 28: tracing's cost")."""
    import aiohttp

    spans = tracer or trace.get_tracer("coffer.http.client")

    async def on_request_start(_session: Any, context: Any, params: Any) -> None:
        if _drops_under_unsampled:
            current = trace.get_current_span().get_span_context()
            if current.is_valid and not current.trace_flags.sampled:
                propagate.inject(params.headers)
                return
        method = params.method
        attributes = {"http.method": method, "http.url": url_filter(params.url)}
        span = spans.start_span(method, kind=SpanKind.CLIENT, attributes=attributes)
        context.coffer_span = span
        context.coffer_token = otel_context.attach(trace.set_span_in_context(span))
        propagate.inject(params.headers)

    def end(context: Any) -> Span | None:
        span: Span | None = getattr(context, "coffer_span", None)
        if span is not None:
            context.coffer_span = None
            otel_context.detach(context.coffer_token)
        return span

    async def on_request_end(_session: Any, context: Any, params: Any) -> None:
        span = end(context)
        if span is not None:
            status = params.response.status
            span.set_attribute("http.status_code", status)
            if status >= 400:
                span.set_status(StatusCode.ERROR)
            span.end()

    async def on_request_exception(_session: Any, context: Any, params: Any) -> None:
        span = end(context)
        if span is not None:
            span.set_status(StatusCode.ERROR, type(params.exception).__qualname__)
            span.record_exception(params.exception)
            span.end()

    config = aiohttp.TraceConfig()
    config.on_request_start.append(on_request_start)
    config.on_request_end.append(on_request_end)
    config.on_request_exception.append(on_request_exception)
    return config


# Query parameters that carry a credential (an upload token: POST /api/uploads?token=…; an
# invitation's token on the sign-up form it leads to: /dashboard/register?invite=…; a signed
# CDN URL's signature, which downloads a private object until it expires).
_SECRET_PARAMS = re.compile(r"(?i)((?:^|[?&])(?:token|invite|signature)=)[^&#]*")
# Path segments that are a credential: the dashboard's invitation and reset links
# (/dashboard/invite/{token}, /dashboard/reset/{token}), and the SHA-256 of those tokens that
# edge sends to auth (/invitations/{hash}, /password-resets/{hash}), which auth accepts as the
# token itself (issue 23: both reached traces).
_SECRET_SEGMENTS = re.compile(
    r"(/(?:invite|reset)/|/(?:invitations|password-resets)/(?=[0-9a-fA-F]{64}))[^/?#]+"
)
# The span attributes that hold the path or query string, under the old and new conventions.
_URL_ATTRIBUTES = ("http.url", "http.target", "url.full", "url.path", "url.query")
# What a path must contain for _SECRET_SEGMENTS to match: checked first, as every span's URL is.
_SECRET_PATH_PARTS = ("/invite/", "/reset/", "/invitations/", "/password-resets/")


def redact_url(text: str) -> str:
    """``text`` (a URL, a path or a query string) with every credential in it replaced."""
    query = text.lower() if "=" in text else ""
    secret = "token=" in query or "invite=" in query or "signature=" in query
    if not (secret or any(part in text for part in _SECRET_PATH_PARTS)):
        return text  # most URLs: two substring checks instead of two regular expressions
    return _SECRET_SEGMENTS.sub(r"\1REDACTED", _SECRET_PARAMS.sub(r"\1REDACTED", text))


def _redactor() -> SpanProcessor:
    """No span keeps a credential sent in the query string or the path: a server span's URL
    attributes are redacted as it starts (FastAPI sets them then), before anything can export
    them. Client spans' URLs are redacted by their own instrumentation (``url_filter``), and no
    other span records a URL, so they are not looked at (issue 28; what the redactor costs a span:
    bench/results/journal.md, "Issue 28: tracing's cost")."""
    from opentelemetry.sdk.trace import SpanProcessor

    class Redactor(SpanProcessor):
        def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:  # noqa: ARG002
            if span.kind is not SpanKind.SERVER:
                return
            attributes = span.attributes or {}
            for name in _URL_ATTRIBUTES:
                value = attributes.get(name)
                if isinstance(value, str) and (redacted := redact_url(value)) != value:
                    span.set_attribute(name, redacted)

    return Redactor()


def _untraced(scope: MutableMapping[str, Any]) -> bool:
    """Probes and scrapes are not traced."""
    return scope.get("path") in EXCLUDED_PATHS


def telemetry() -> TelemetryConfig:
    """FastAPI's own telemetry for an app: with tracing on, one server span per request, named
    by the router after the route it selected (no second walk over the routes, and none of the
    per-message ``http send`` spans an ASGI middleware adds); off otherwise. FastAPI's metrics
    and logs stay off: Coffer has its own (coffer_kit.metrics, coffer_kit.logs)."""
    if not _enabled:
        # FastAPI's bridge would otherwise ask for the global providers on every request (a
        # few percent of a hot read's CPU), though none is ever configured.
        return {"tracing": False, "metrics": False, "logs": False}
    return {"tracing": True, "metrics": False, "logs": False, "operation_spans": False, "exclude": _untraced}


def instrument_engine(engine: Any) -> None:
    """Client spans for every SQL statement on ``engine``."""
    if _enabled:
        from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor

        SQLAlchemyInstrumentor().instrument(engine=engine)


def shutdown_tracing() -> None:
    """Flush spans still queued (called on shutdown)."""
    provider = trace.get_tracer_provider()
    if hasattr(provider, "shutdown"):
        provider.shutdown()


def current_trace_id() -> str | None:
    """The current span's trace id in hex, for log lines; None when untraced."""
    if not _enabled:
        return None
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


tracer = trace.get_tracer("coffer")
