"""OpenTelemetry traces, configured only by the standard ``OTEL_*`` variables.

Off (nothing instrumented, no cost on the hot path) unless ``OTEL_EXPORTER_OTLP_ENDPOINT``
or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set. Exports OTLP over HTTP/protobuf.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

from opentelemetry import trace

log = logging.getLogger("coffer.tracing")
_enabled = False
# Probes and scrapes are not traced.
EXCLUDED_URLS = "healthz,readyz,metrics"


def tracing_configured() -> bool:
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def setup_tracing(service: str) -> bool:
    """Install a tracer provider for ``coffer-<service>`` if an OTLP endpoint is configured."""
    global _enabled
    if _enabled or not tracing_configured() or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return _enabled
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
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _enabled = True
    return True


def tracing_enabled() -> bool:
    return _enabled


# Query parameters that carry a credential (an upload token: POST /api/uploads?token=…).
_SECRET_PARAMS = re.compile(r"(?i)((?:^|[?&])token=)[^&#]*")
# Path segments that are a credential: the dashboard's invitation and reset links
# (/dashboard/invite/{token}, /dashboard/reset/{token}), and the SHA-256 of those tokens that
# edge sends to auth (/invitations/{hash}, /password-resets/{hash}), which auth accepts as the
# token itself (issue 23: both reached traces).
_SECRET_SEGMENTS = re.compile(
    r"(/(?:invite|reset)/|/(?:invitations|password-resets)/(?=[0-9a-fA-F]{64}))[^/?#]+"
)
# The span attributes that hold the path or query string, under the old and new conventions.
_URL_ATTRIBUTES = ("http.url", "http.target", "url.full", "url.path", "url.query")


def redact_url(text: str) -> str:
    """``text`` (a URL, a path or a query string) with every credential in it replaced."""
    return _SECRET_SEGMENTS.sub(r"\1REDACTED", _SECRET_PARAMS.sub(r"\1REDACTED", text))


def _redact_server_span(span: Any, scope: dict[str, Any]) -> None:
    """Server request hook: no span keeps a credential sent in the query string or the path."""
    if span is None or not span.is_recording():
        return
    if b"token=" not in scope.get("query_string", b"").lower() and not _SECRET_SEGMENTS.search(
        scope.get("path", "")
    ):
        return
    attributes = getattr(span, "attributes", None) or {}
    for name in _URL_ATTRIBUTES:
        value = attributes.get(name)
        if isinstance(value, str):
            span.set_attribute(name, redact_url(value))


def instrument_app(app: Any) -> None:
    """Server spans for a FastAPI app (one trace per request, W3C traceparent honoured)."""
    if _enabled:
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        FastAPIInstrumentor.instrument_app(
            app, excluded_urls=EXCLUDED_URLS, server_request_hook=_redact_server_span
        )


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
