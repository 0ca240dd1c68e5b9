"""An OTLP/HTTP (protobuf) trace receiver on loopback, for tests that check spans."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from coffer_testkit.testing import free_port


class OtlpReceiver:
    """Keeps every span it is sent. Close it only after the services that export to it have
    stopped: a service flushes its last spans as it stops, and a receiver that no longer
    answers holds it there for the exporter's whole timeout."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                request = ExportTraceServiceRequest()
                request.ParseFromString(self.rfile.read(int(self.headers["content-length"])))
                with receiver.lock:
                    for resource_spans in request.resource_spans:
                        attrs = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                        for scope in resource_spans.scope_spans:
                            for span in scope.spans:
                                receiver.spans.append(
                                    {
                                        "service": attrs.get("service.name"),
                                        "trace_id": span.trace_id.hex(),
                                        "span_id": span.span_id.hex(),
                                        "parent": span.parent_span_id.hex() or None,
                                        "name": span.name,
                                        "kind": span.kind,
                                        "attributes": {a.key: a.value.string_value for a in span.attributes},
                                        "links": [(ln.trace_id.hex(), ln.span_id.hex()) for ln in span.links],
                                    }
                                )
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def exporter_env(self, *, accept_client_context: bool = True) -> dict[str, str]:
        """The settings that make a stack's services export their spans here, promptly; and,
        unless told otherwise, take the trace a test sends (``traceparent``) as an ingress's
        (COFFER_TRACE_ACCEPT_CLIENT_CONTEXT), so that it can follow its request by it."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.url,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "COFFER_TRACE_ACCEPT_CLIENT_CONTEXT": str(accept_client_context).lower(),
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.spans)

    def trace(
        self, traceparent: str, services: set[str], timeout: float = 15, has: tuple[str, ...] = ()
    ) -> list[dict[str, Any]]:
        """The spans of one trace, once every named service has reported into it, every span's
        parent has arrived but the caller's, and for each prefix in ``has`` a span whose name
        starts with it has (each process exports in its own batches, and a server span ends, so
        is exported, after the spans inside it; but a batch holding a whole request's spans, one
        of several a service answered in the trace, can still be on its way)."""
        _, trace_id, client_parent, _ = traceparent.split("-")
        deadline = time.monotonic() + timeout
        while True:
            spans = [s for s in self.snapshot() if s["trace_id"] == trace_id]
            ids = {s["span_id"] for s in spans}
            orphans = [s for s in spans if s["parent"] not in ids]
            names = {s["name"] for s in spans}
            complete = (
                services <= {s["service"] for s in spans}
                and [o["parent"] for o in orphans] == [client_parent]
                and all(any(n.startswith(prefix) for n in names) for prefix in has)
            )
            if complete or time.monotonic() > deadline:
                return spans
            time.sleep(0.1)
