"""OpenTelemetry traces, configured only by the standard ``OTEL_*`` variables.

Off (nothing instrumented, no cost on the hot path) unless ``OTEL_EXPORTER_OTLP_ENDPOINT``
or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set. Exports OTLP over HTTP/protobuf.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

if TYPE_CHECKING:  # the SDK is imported only once tracing is on: untraced processes never load it
    from fastapi.telemetry import TelemetryConfig
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import Span, SpanProcessor

log = logging.getLogger("coffer.tracing")
_enabled = False
# Probes and scrapes are not traced.
EXCLUDED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


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
    provider.add_span_processor(_redactor())
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
# What a path must contain for _SECRET_SEGMENTS to match: checked first, as every span's URL is.
_SECRET_PATH_PARTS = ("/invite/", "/reset/", "/invitations/", "/password-resets/")


def redact_url(text: str) -> str:
    """``text`` (a URL, a path or a query string) with every credential in it replaced."""
    if not (("=" in text and "token=" in text.lower()) or any(part in text for part in _SECRET_PATH_PARTS)):
        return text  # most URLs: two substring checks instead of two regular expressions
    return _SECRET_SEGMENTS.sub(r"\1REDACTED", _SECRET_PARAMS.sub(r"\1REDACTED", text))


def _redactor() -> SpanProcessor:
    """No span keeps a credential sent in the query string or the path: a span's URL
    attributes are redacted as it starts (FastAPI's server spans set them then; client spans'
    URLs are redacted by their own instrumentation), before anything can export them."""
    from opentelemetry.sdk.trace import SpanProcessor

    class Redactor(SpanProcessor):
        def on_start(self, span: Span, parent_context: Context | None = None) -> None:  # noqa: ARG002
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
