"""An OTLP/HTTP trace receiver for the benchmark: answers every export at once and counts the
spans it was sent (GET /count), so a traced figure can say how many spans a request made.

Run as its own process (``python bench/otlp_sink.py PORT``), so its CPU is not Coffer's.
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

_lock = threading.Lock()
_spans = 0


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        global _spans
        request = ExportTraceServiceRequest()
        request.ParseFromString(self.rfile.read(int(self.headers.get("content-length") or 0)))
        count = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        with _lock:
            _spans += count
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        body = str(_spans).encode()
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), _Handler).serve_forever()
