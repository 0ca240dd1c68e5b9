"""The dashboard's response headers and its first CSRF layer (the cross-origin check).

Both run as one pure ASGI middleware on every request under ``/dashboard``, so an error page,
a redirect and a static file get the same headers as a page, and a cross-site post is refused
before any route, form parser or auth call runs.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

PREFIX = "/dashboard"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CROSS_ORIGIN_MESSAGE = "This request did not come from the dashboard. Reload and try again."


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a URL, as browsers send it in ``Origin``."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def content_security_policy(cdn_url: str) -> str:
    """DASHBOARD.md §4: scripts and styles from the dashboard only; tenant files from the CDN."""
    cdn = origin_of(cdn_url)
    return (
        "default-src 'self'; script-src 'self'; style-src 'self'; "
        f"img-src 'self' {cdn} data:; media-src {cdn}; connect-src 'self' {cdn}; "
        "frame-src 'none'; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    )


def cross_origin_refused(method: str, sec_fetch_site: str | None, origin: str | None, allowed: str) -> bool:
    """Go 1.25 ``net/http.CrossOriginProtection``, stricter on one point.

    Safe methods pass. ``Sec-Fetch-Site`` decides when the browser sent it (Chromium does on
    https and loopback): ``same-origin`` or ``none`` (typed in the address bar) pass. Without
    it (plain http to another host), ``Origin`` must be the dashboard's. Go lets a request with
    neither header through as "not from a browser"; this route family has no other clients, so
    it is refused.
    """
    if method in SAFE_METHODS:
        return False
    if sec_fetch_site is not None:
        return sec_fetch_site not in ("same-origin", "none")
    if origin is None:
        return True
    return origin.lower() != allowed


def _in_dashboard(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


class DashboardGuard:
    """Security headers on every dashboard response; 403 for a cross-origin unsafe request."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        dashboard_url: str,
        cdn_url: str,
        refusal: Callable[[Scope], bytes],
    ) -> None:
        self.app = app
        self.allowed_origin = origin_of(dashboard_url)
        self.https = dashboard_url.startswith("https://")
        self.refusal = refusal
        self.headers: list[tuple[bytes, bytes]] = [
            (b"content-security-policy", content_security_policy(cdn_url).encode()),
            (b"x-content-type-options", b"nosniff"),
            (b"x-frame-options", b"DENY"),
        ]
        if self.https:
            self.headers.append((b"strict-transport-security", b"max-age=31536000; includeSubDomains"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _in_dashboard(scope["path"]):
            await self.app(scope, receive, send)
            return
        request_headers = dict(scope["headers"])
        fetch_site = request_headers.get(b"sec-fetch-site")
        origin = request_headers.get(b"origin")
        if cross_origin_refused(
            scope["method"],
            fetch_site.decode("latin-1") if fetch_site is not None else None,
            origin.decode("latin-1") if origin is not None else None,
            self.allowed_origin,
        ):
            body = self.refusal(scope)
            await self._send_headers(
                send,
                {
                    "type": "http.response.start",
                    "status": 403,
                    "headers": [
                        (b"content-type", b"text/html; charset=utf-8"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                },
                static=False,
            )
            await send({"type": "http.response.body", "body": body})
            return
        static = scope["path"].startswith(PREFIX + "/static/")

        async def send_with_headers(message: Message) -> None:
            await self._send_headers(send, message, static=static)

        await self.app(scope, receive, send_with_headers)

    async def _send_headers(self, send: Send, message: Message, *, static: bool) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            present = {name.lower() for name, _ in headers}
            headers.extend(h for h in self.headers if h[0] not in present)
            if b"referrer-policy" not in present:
                headers.append((b"referrer-policy", b"same-origin"))
            if not static:
                # Every page but the static files is personal or may show a secret: never stored.
                if b"cache-control" not in present:
                    headers.append((b"cache-control", b"no-store"))
                # A URL answers a whole page or, for htmx, one block of it.
                headers.append((b"vary", b"HX-Request"))
            message["headers"] = headers
        await send(message)
