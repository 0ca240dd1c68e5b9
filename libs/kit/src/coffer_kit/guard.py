"""Pure ASGI guards every service shares: no exception closes a keep-alive connection, and a
405 names every method its path allows.

Starlette's own last-resort handler (``ServerErrorMiddleware``) answers a 500 and then
re-raises, and uvicorn closes a connection whose application raised. A client that pools
connections (edge's internal clients do) then meets a dead connection on its next request,
which is another tenant's request (issue 11, item 1). The guard answers the contract's 500
envelope and returns normally, so the connection stays usable.
"""

from __future__ import annotations

import json
import logging
import re

from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coffer_kit.errors import envelope

log = logging.getLogger("coffer.errors")


class UnhandledErrorMiddleware:
    """Turn any exception that escapes the app into a 500 envelope, keeping the connection;
    and give a 405 an ``Allow`` header listing the methods of every route on the path, not
    just the first one's (FastAPI registers one route per method, and Starlette answers from
    the first match). One layer for both, so a response passes one ``send`` wrapper, not two.

    If the response had already started, nothing sound can be sent any more: the exception is
    re-raised and the server ends the connection, as it must for a cut-off response.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if message["status"] == 405:
                    _add_allow(scope, message)
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            request_id = scope.get("state", {}).get("request_id")
            if started:
                raise
            log.exception("unhandled error", extra={"request_id": request_id})
            body = json.dumps(envelope("internal", "Internal server error.", request_id)).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})


def _add_allow(scope: Scope, message: Message) -> None:
    allowed = _allowed_methods(scope)
    if allowed:
        headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"allow"]
        headers.append((b"allow", ", ".join(allowed).encode()))
        message["headers"] = headers


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed_methods(scope: Scope) -> list[str]:
    """Every method some route would take on this path, asked of the routes themselves
    (``BaseRoute.matches``), so included routers and mounts answer for their own routes."""
    routes = getattr(getattr(scope.get("app"), "router", None), "routes", [])
    allowed = []
    for method in _METHODS:
        probe = {**scope, "method": method}
        if any(route.matches(probe)[0] == Match.FULL for route in routes):
            allowed.append(method)
    return allowed


# A JSON string escape of a UTF-16 surrogate: the only way a JSON text can carry one.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")


def _is_json(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-type":
            media: bytes = value.split(b";", 1)[0].strip().lower()
            return media == b"application/json" or (
                media.startswith(b"application/") and media.endswith(b"+json")
            )
    return False


def _lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


class JsonTextMiddleware:
    """A JSON body whose strings are not valid Unicode (a lone surrogate escape such as
    ``"\\ud800"``, RFC 8259 §8.2) is refused with 400, before any route sees it.

    Python's ``json`` decodes such an escape into a string that cannot be encoded, which then
    failed deep inside a service (a database driver, a log line) as a 500. Every JSON body
    is read whole by its route anyway; this holds it once more only to look for the escape,
    and parses it only if one is there (pairs, as emoji are written, are fine).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS") or not _is_json(scope):
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        chunks: list[bytes] = []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if _SURROGATE_ESCAPE.search(body) and _holds_lone_surrogate(body):
            request_id = scope.get("state", {}).get("request_id")
            error = envelope(
                "invalid_request",
                "The JSON body holds a string that is not valid Unicode (a lone surrogate).",
                request_id,
                {"field": "body"},
            )
            payload = json.dumps(error).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(payload)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": payload})
            return
        pending = iter(messages)

        async def replay() -> Message:
            message = next(pending, None)
            return message if message is not None else await receive()

        await self.app(scope, replay, send)


def _holds_lone_surrogate(body: bytes) -> bool:
    try:
        value = json.loads(body)
    except ValueError:  # not JSON at all: the route answers that
        return False
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _lone_surrogate(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
