"""Request id and access-log middleware (pure ASGI, so streamed bodies pass untouched)."""

from __future__ import annotations

import logging
import re
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coffer_kit.ids import new_id

REQUEST_ID_HEADER = "x-request-id"
_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_QUIET_PATHS = {"/healthz", "/readyz", "/metrics"}

access_log = logging.getLogger("coffer.access")


class RequestContextMiddleware:
    """Echo or mint ``X-Request-Id`` and log one JSON line per request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                sent = value.decode("latin-1")
                break
        request_id = sent if sent and _VALID_REQUEST_ID.match(sent) else new_id("req")
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 500

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
                route = scope.get("route")
                state = scope.get("state", {})
                access_log.info(
                    "request",
                    extra={
                        "request_id": request_id,
                        "method": scope.get("method"),
                        "route": getattr(route, "path", None) or "unmatched",
                        "status": status,
                        "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                        "organization_id": state.get("organization_id"),
                    },
                )
