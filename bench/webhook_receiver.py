"""The bench's webhook receiver, a process of its own (so its work does not share the harness's
interpreter): verifies every delivery with the ``standardwebhooks`` library against the raw
body, answers 204, and prints one line per delivery: ``<asset id or event type> <monotonic
seconds>`` (CLOCK_MONOTONIC is one clock for every process on Linux), or ``BAD <why>``.

Usage: python bench/webhook_receiver.py PORT  (the secret on stdin's first line).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

MAX_BODY = 1024 * 1024


def main() -> None:
    port = int(sys.argv[1])
    webhook = Webhook(sys.stdin.readline().strip())
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a real receiver would serve

        def do_POST(self) -> None:
            length = min(int(self.headers.get("content-length", "0")), MAX_BODY)
            body = self.rfile.read(length)
            try:
                event = webhook.verify(body, dict(self.headers.items()))
                arrived = time.monotonic()
                asset = event.get("data", {}).get("asset") or {}
                line = f"{asset.get('id') or event['type']} {arrived:.6f}"
            except (WebhookVerificationError, ValueError, KeyError) as exc:
                line = f"BAD {type(exc).__name__}"
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()
            with lock:
                print(line, flush=True)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print(json.dumps({"listening": port}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
