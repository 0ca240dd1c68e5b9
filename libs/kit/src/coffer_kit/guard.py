"""Pure ASGI guards every service shares: no exception closes a keep-alive connection, a
405 names every method its path allows, and every request body is bounded before any route.

Starlette's own last-resort handler (``ServerErrorMiddleware``) answers a 500 and then
re-raises, and uvicorn closes a connection whose application raised. A client that pools
connections (edge's internal clients do) then meets a dead connection on its next request,
which is another tenant's request (issue 11, item 1). The guard answers the contract's 500
envelope and returns normally, so the connection stays usable.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass

from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coffer_kit.contract.errors import CofferError, envelope, file_too_large, request_timeout

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
# JSON strings (escapes included), so the brackets inside them are not counted as nesting.
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = bytes(range(256)).translate(None, b"[]{}")  # every byte but the four brackets
_METHODS_WITHOUT_BODY = ("GET", "HEAD", "OPTIONS", "DELETE")

# A body read whole here (at most ``body_bytes``, 64 KiB by default) may pause this long between
# two pieces, and must arrive whole within BODY_SECONDS of the head: 64 KiB in 30 s is 2 KiB/s,
# slower than any link a person uses. Without them a client sending a byte every few seconds
# held a connection for good, before any route and so before authentication. An upload's
# body is the route's to time (edge's ``client_idle_timeout_seconds``).
BODY_IDLE_SECONDS = 10.0
BODY_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class BodyLimits:
    """The bounds on request bodies, checked before any route (so before authentication).

    ``body_bytes``: any body not streamed, read whole by its route (JSON, forms); refused
    from ``Content-Length`` or while counting. ``json_depth``: nesting of a JSON body.
    ``streamed``: (method, path pattern, limit) of the routes that stream their body
    (uploads): refused here from ``Content-Length`` only; the route counts what arrives.
    ``larger``: (method, path pattern, limit) of the routes whose body, read whole and checked
    like any other, may pass ``body_bytes`` (a batch). ``idle_seconds``, ``body_seconds``: how
    long a body read whole may pause, and take in all (408 ``request_timeout`` past either).
    """

    body_bytes: int = 64 * 1024
    json_depth: int = 32
    streamed: tuple[tuple[str, re.Pattern[str], int], ...] = ()
    larger: tuple[tuple[str, re.Pattern[str], int], ...] = ()
    idle_seconds: float = BODY_IDLE_SECONDS
    body_seconds: float = BODY_SECONDS

    def streamed_limit(self, scope: Scope) -> int | None:
        return _route_limit(self.streamed, scope)

    def whole_limit(self, scope: Scope) -> int:
        """The bound on a body read whole by its route."""
        return _route_limit(self.larger, scope) or self.body_bytes


def _route_limit(routes: tuple[tuple[str, re.Pattern[str], int], ...], scope: Scope) -> int | None:
    for method, pattern, limit in routes:
        if scope["method"] == method and pattern.fullmatch(scope["path"]):
            return limit
    return None


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return value  # type: ignore[no-any-return]
    return None


def _is_json(scope: Scope) -> bool:
    value = _header(scope, b"content-type")
    if value is None:
        return False
    media = value.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


def _lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def json_too_deep(body: bytes, limit: int) -> bool:
    """Whether a JSON text nests arrays and objects deeper than ``limit`` (strings skipped).
    Python's parser recurses: 10,000 levels raised RecursionError, a 500 (issue 23)."""
    depth = 0
    for byte in _JSON_STRING.sub(b'""', body).translate(None, _BRACKETS):
        if byte in b"[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


async def _refuse(
    scope: Scope, send: Send, status: int, code: str, message: str, field: str | None = "body"
) -> None:
    request_id = scope.get("state", {}).get("request_id")
    details = {"field": field} if field else None
    payload = json.dumps(envelope(code, message, request_id, details), separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                # The rest of the body is not read: the connection cannot be reused.
                *([(b"connection", b"close")] if status in (408, 413) else []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class BodyGuardMiddleware:
    """Every request body bounded before any route sees it (issue 23: 30 MiB of JSON sent
    without a key grew edge by 890 MiB; 10,000-deep JSON was a 500).

    A body a route streams (an upload) is refused here only from ``Content-Length``; any
    other body is read here up to its bound (refused with 413 past it, from
    ``Content-Length`` or while counting), then, when it is JSON, refused with 400 if it
    nests too deep or holds a string that is not valid Unicode (a lone surrogate escape such
    as ``"\\ud800"``, RFC 8259 §8.2, which failed deep inside a service as a 500), and
    handed to the route as it arrived.
    """

    def __init__(self, app: ASGIApp, limits: BodyLimits | None = None) -> None:
        self.app = app
        self.limits = limits or BodyLimits()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in _METHODS_WITHOUT_BODY:
            await self.app(scope, receive, send)
            return
        streamed = self.limits.streamed_limit(scope)
        limit = streamed if streamed is not None else self.limits.whole_limit(scope)
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            if streamed is None:
                await _refuse(scope, send, 413, "body_too_large", _too_large(limit))
            else:  # an upload: the contract's code for a file over 100 MiB
                error = file_too_large()
                await _refuse(scope, send, error.status, error.code, error.message, field=None)
            return
        if streamed is not None:
            await self.app(scope, receive, send)
            return
        try:
            messages = await _read_at_most(receive, limit, self.limits)
        except CofferError as error:  # 408: the client went quiet, or is too slow
            log.info("request body too slow", extra={"request_id": scope.get("state", {}).get("request_id")})
            await _refuse(scope, send, error.status, error.code, error.message, field=None)
            return
        if messages is None:
            await _refuse(scope, send, 413, "body_too_large", _too_large(limit))
            return
        problem = self._json_problem(scope, messages)
        if problem is not None:
            await _refuse(scope, send, 400, "invalid_request", problem)
            return
        pending = iter(messages)

        async def replay() -> Message:
            message = next(pending, None)
            return message if message is not None else await receive()

        await self.app(scope, replay, send)

    def _json_problem(self, scope: Scope, messages: list[Message]) -> str | None:
        if not _is_json(scope):
            return None
        body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
        if json_too_deep(body, self.limits.json_depth):
            return f"The JSON body nests deeper than {self.limits.json_depth} levels."
        if _SURROGATE_ESCAPE.search(body) and _holds_lone_surrogate(body):
            return "The JSON body holds a string that is not valid Unicode (a lone surrogate)."
        return None


async def _read_at_most(receive: Receive, limit: int, limits: BodyLimits) -> list[Message] | None:
    """The request's messages, or None once its body passes ``limit`` bytes; 408
    ``request_timeout`` when the client sends nothing for ``limits.idle_seconds``, or not all
    of it within ``limits.body_seconds``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limits.body_seconds
    messages: list[Message] = []
    size = 0
    while True:
        remaining = deadline - loop.time()
        idle = limits.idle_seconds < remaining  # which bound ends this wait first
        try:
            async with asyncio.timeout(limits.idle_seconds if idle else remaining):
                message = await receive()
        except TimeoutError:
            if idle:
                raise request_timeout(limits.idle_seconds, upload=False) from None
            raise request_timeout(limits.body_seconds, whole=True, upload=False) from None
        messages.append(message)
        if message["type"] != "http.request":
            return messages
        size += len(message.get("body", b""))
        if size > limit:
            return None
        if not message.get("more_body", False):
            return messages


def _too_large(limit: int) -> str:
    return f"The request body is larger than {limit:,} bytes."


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
