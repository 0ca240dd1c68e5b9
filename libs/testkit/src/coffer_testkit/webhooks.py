"""A webhook receiver for tests: an HTTP server on loopback that keeps every request it gets
(headers and raw body) and answers as the test says, so deliveries can be verified with the
``standardwebhooks`` library against the bytes that arrived."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook

# The settings that let metadata deliver to a receiver on loopback over plain HTTP, which its
# webhook URL rules refuse by default (a stack's environment).
LOOPBACK_ENV = {
    "COFFER_METADATA_WEBHOOK_ALLOW_HTTP": "true",
    "COFFER_METADATA_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
}


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def id(self) -> str:
        return self.headers["webhook-id"]

    def verified(self, secret: str) -> dict[str, Any]:
        """The body, once the reference library has verified its signature."""
        return Webhook(secret).verify(self.body, self.headers)  # type: ignore[no-any-return]


@dataclass
class Receiver:
    """Every request it got; ``answers`` maps a path to how it answers (status and body;
    status 0 hangs until the receiver stops), 200 "ok" otherwise."""

    url: str = ""
    received: list[Received] = field(default_factory=list)
    answers: dict[str, Callable[[Received], tuple[int, bytes]]] = field(default_factory=dict)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path == path]

    def wait(self, path: str, count: int, *, timeout: float = 15) -> list[Received]:
        """Poll until ``count`` requests reached ``path``."""
        deadline = time.monotonic() + timeout
        while len(got := self.on(path)) < count:
            assert time.monotonic() < deadline, f"{len(got)} of {count} deliveries reached {path}"
            time.sleep(0.02)
        return got


@contextlib.contextmanager
def webhook_receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            got = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic())
            with state.lock:
                state.received.append(got)
            answer = state.answers.get(self.path)
            status, text = answer(got) if answer else (200, b"ok")
            if status == 0:  # hang until the test ends (the dispatcher gives up after 10 s)
                state.release.wait(30)
                return
            with contextlib.suppress(ConnectionError):  # a dispatcher the test killed
                self.send_response(status)
                if status in (301, 302, 307):
                    self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
