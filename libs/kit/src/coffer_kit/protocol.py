"""uvicorn's httptools protocol with two changes: a bound on the request head (431), and the
contract's error envelope on the answers the HTTP parser gives by itself (400).

Why httptools, bounded here, rather than h11's ``h11_max_incomplete_event_size``: h11 would
bound the head, but answers a plain-text 400 rather than 431, and parses in pure Python
(bench/results/anatomy.md: most of edge's CPU is per-request overhead). httptools has no
bound at all: its Python wrapper gathers a header value by concatenation, so a 128 MiB
header was held whole (edge peaked at 318 MiB RSS and answered after 17 s, issue 11).
Counting the bytes fed to the parser while the head is incomplete stops such a request after
``MAX_HEAD_BYTES`` plus at most one socket read (256 KiB), whatever the client sends.
"""

from __future__ import annotations

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

_REASONS = {400: b"Bad Request", 431: b"Request Header Fields Too Large"}


class CofferHttpProtocol(HttpToolsProtocol):
    """One connection; see the module docstring."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._in_head = True
        self._head_bytes = 0
        self._refused = False

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
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head = False
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
