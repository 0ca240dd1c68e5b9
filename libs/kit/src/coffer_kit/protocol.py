"""uvicorn's httptools protocol with three changes: a bound on the request head's size (431)
and on the time it takes to arrive (408), and the contract's error envelope on the answers the
HTTP parser gives by itself (400).

Why httptools, bounded here, rather than h11's ``h11_max_incomplete_event_size``: h11 would
bound the head, but answers a plain-text 400 rather than 431, and parses in pure Python
(bench/results/anatomy.md: most of edge's CPU is per-request overhead). httptools has no
bound at all: its Python wrapper gathers a header value by concatenation, so a 128 MiB
header was held whole (edge peaked at 318 MiB RSS and answered after 17 s, issue 11).
Counting the bytes fed to the parser while the head is incomplete stops such a request after
``MAX_HEAD_BYTES`` plus at most one socket read (256 KiB), whatever the client sends.

uvicorn bounds only the wait between two requests of a keep-alive connection
(``timeout_keep_alive``): a new connection that sent nothing, or a head sent one header line
every few seconds, was held open for good, before any route and so before authentication.
The head's clock starts when the connection is made, or when the first
byte of a later request's head arrives, and stops when the head is complete: a response, a
streamed answer or an upload's body is never timed by it.
"""

from __future__ import annotations

import asyncio
import json
import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from coffer_kit.contract.errors import envelope
from coffer_kit.contract.ids import new_id

log = logging.getLogger("coffer.http")

# The request line and all headers together. Node allows 16 KiB, nginx 32 KiB (4 x 8 KiB
# buffers), Go 1 MiB; Coffer's own requests use under 1 KiB (a key, a request id, a
# traceparent), and an upload token travels in the URL (about 200 bytes).
MAX_HEAD_BYTES = 64 * 1024

# The whole request head (line and headers) must arrive within this, from the connection's
# start or the head's first byte. A browser or client sends it in one write (a few ms); nginx
# allows 60 s (client_header_timeout), Node 60 s (headersTimeout); 10 s is generous for a
# head under MAX_HEAD_BYTES on a slow link and holds an idle connection briefly.
HEAD_TIMEOUT_SECONDS = 10.0

_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


class CofferHttpProtocol(HttpToolsProtocol):
    """One connection; see the module docstring."""

    # HEAD_TIMEOUT_SECONDS; a class attribute so that a test can shorten it.
    head_timeout_seconds = HEAD_TIMEOUT_SECONDS

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._in_head = True
        self._head_bytes = 0
        self._refused = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_begun = False  # a byte of the current head has arrived

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        # Still inside a head after this read: every byte of it was head (or, after a
        # pipelined request, the head began in it: counting it whole errs on the safe side).
        if self._in_head and not self._refused and self.parser is not None:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._head_too_large(self._head_bytes)

    def on_message_begin(self) -> None:
        self._in_head = True
        self._head_bytes = 0
        self._head_begun = True
        if self._head_timer is None:  # a later request's head (the first one's runs already)
            self._arm_head_timer()
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_begun = False
        self._disarm_head_timer()
        if self._refused:
            return
        # A head that arrived whole in one read: measured from what was parsed.
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > MAX_HEAD_BYTES:
            self._head_too_large(size)
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._refused:
            super().on_message_complete()

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self.head_timeout_seconds, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._refused or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # A pipelined head behind an answer still being sent: its clock is wound again,
            # so that answer (a long download, say) is never cut short for it.
            self._arm_head_timer()
            return
        if not self._head_begun:
            # Nothing of a request arrived: nothing to answer.
            self.transport.close()
            return
        log.warning("request head too slow", extra={"seconds": self.head_timeout_seconds})
        self._send_error(
            408,
            "request_timeout",
            f"The request line and headers did not arrive within {self.head_timeout_seconds:g} s.",
        )

    def _head_too_large(self, size: int) -> None:
        log.warning("request head too large", extra={"bytes": size})
        self._send_error(
            431, "headers_too_large", f"The request line and headers exceed {MAX_HEAD_BYTES} bytes."
        )

    def send_400_response(self, msg: str) -> None:  # noqa: ARG002 - our own message instead
        """The parser refused the request (malformed HTTP): the envelope, then close."""
        if self._refused:
            return
        self._send_error(400, "invalid_request", "The request is not valid HTTP/1.1.")

    def _send_error(self, status: int, code: str, message: str) -> None:
        self._refused = True
        self._disarm_head_timer()
        request_id = new_id("req")
        body = json.dumps(envelope(code, message, request_id)).encode()
        head = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])]
        for name, value in self.server_state.default_headers:
            head.append(name + b": " + value + b"\r\n")
        head += [
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"x-request-id: " + request_id.encode() + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
        if self.cycle is not None and not self.cycle.response_complete:
            # A request on this connection is still being answered: it will not be.
            self.cycle.disconnected = True
        self.transport.write(b"".join(head) + body)
        self.transport.close()
