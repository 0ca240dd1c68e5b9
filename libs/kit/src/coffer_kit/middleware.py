"""Request id and access-log middleware (pure ASGI, so streamed bodies pass untouched)."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coffer_kit.contract.ids import REQUEST, new_id
from coffer_kit.metrics import observe_request
from coffer_kit.tracing import current_trace_id

# A sent X-Request-Id is echoed when it is 1-128 of these (docs/api.md, Errors): URL-unreserved
# characters (UUIDs, ULIDs, W3C trace ids, base64url), base64's + / =, and ':' for `svc:id`
# shapes. No space, comma, quote, backslash or control character ever reaches a header, a log
# line or a page: anything else is replaced by a generated id.
REQUEST_ID_CHARACTERS = r"A-Za-z0-9._~:/+=-"
REQUEST_ID_MAX_LENGTH = 128
_VALID_REQUEST_ID = re.compile(f"[{REQUEST_ID_CHARACTERS}]{{1,{REQUEST_ID_MAX_LENGTH}}}")
_QUIET_PATHS = {"/healthz", "/readyz", "/metrics"}
# Routes edge's workers poll about once a second each (the scan, scan-sync and image-facts
# queues, the audit relay): their answers are logged at DEBUG unless they fail, so that an
# idle installation's log is not three lines a second of nothing (they are still counted).
POLLED_ROUTES = frozenset(
    {
        "/internal/v1/scans/claim",
        "/internal/v1/scan-syncs/claim",
        "/internal/v1/facts/claim",
        "/internal/v1/events/audit-pending",
    }
)

access_log = logging.getLogger("coffer.access")


class RequestContextMiddleware:
    """Echo or mint ``X-Request-Id``; count, time and log (one JSON line) every request."""

    def __init__(self, app: ASGIApp, service: str) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                sent = value.decode("latin-1")
                break
        # fullmatch: `$` would also match before a trailing newline.
        request_id = sent if sent and _VALID_REQUEST_ID.fullmatch(sent) else new_id(REQUEST)
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 500
        trace_id = current_trace_id()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"]
                headers.append((b"x-request-id", request_id.encode("latin-1")))
                message["headers"] = headers
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            path = scope.get("path", "")
            if path not in _QUIET_PATHS:
                seconds = time.perf_counter() - started
                # The route template, never the raw path: ids stay out of labels and logs.
                route = getattr(scope.get("route"), "path", None) or "unmatched"
                method = scope.get("method", "")
                observe_request(self.service, route, method, status, seconds)
                polled = route in POLLED_ROUTES and status < 400
                access_log.log(
                    logging.DEBUG if polled else logging.INFO,
                    "request",
                    extra={
                        "request_id": request_id,
                        "trace_id": trace_id,
                        "method": method,
                        "route": route,
                        "status": status,
                        "duration_ms": round(seconds * 1000, 2),
                        "organization_id": scope.get("state", {}).get("organization_id"),
                    },
                )


def inside_request_context(app: Starlette, layers: list[Middleware]) -> None:
    """Put ``layers`` (outermost first) just inside the request-id and access-log middleware,
    which is outside every other layer: they see each request with its id, and are counted
    and logged like the app. Before the app serves its first request."""
    classes: list[object] = [middleware.cls for middleware in app.user_middleware]
    context = classes.index(RequestContextMiddleware)
    app.user_middleware[context + 1 : context + 1] = layers


Headers = list[tuple[bytes, bytes]]


class ResponseHeadersMiddleware:
    """Set headers on every answer to the requests ``headers_for`` picks, errors included
    (the handlers that write error envelopes know nothing of CORS or caching), replacing
    any header of the same name the app set. ``headers_for`` returns ``None`` to pass a
    request through untouched."""

    def __init__(self, app: ASGIApp, headers_for: Callable[[Scope], Headers | None]) -> None:
        self.app = app
        self.headers_for = headers_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        extra = self.headers_for(scope) if scope["type"] == "http" else None
        if not extra:
            await self.app(scope, receive, send)
            return
        names = {name for name, _ in extra}

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message["headers"] = kept + extra
            await send(message)

        await self.app(scope, receive, send_with_headers)
