"""Loaded by every service process of a test stack whose PYTHONPATH names this folder.

It forces a real unhandled exception inside a service: a request whose ``X-Request-Id``
starts with ``fault-<service>`` raises in that service's innermost middleware, exactly where
a bug in a route would; ``fault-<service>-<METHOD>-…`` (an upper-case method) only in that
service's requests of that method, so a test can fail one step of a protocol. edge passes
the public request's id to every internal call, so a public request reaches the fault
through the real internal connection it would use.
"""

from __future__ import annotations

from typing import Any

from starlette.middleware import Middleware

import coffer_kit.app as kit_app

_base_app = kit_app.base_app


class _Fault:
    def __init__(self, app: Any, service: str) -> None:
        self.app = app
        self.prefix = f"fault-{service}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if name == b"x-request-id" and value.startswith(self.prefix):
                    method = value[len(self.prefix) :].split(b"-")[1:2]
                    if not method or not method[0].isupper() or method[0].decode() == scope["method"]:
                        raise RuntimeError("a fault the test forced")
        await self.app(scope, receive, send)


def base_app(title: str, service: str | None = None, **kwargs: Any) -> Any:
    app = _base_app(title, service, **kwargs)
    # Last in the list is innermost: inside every middleware the kit installs.
    app.user_middleware.append(Middleware(_Fault, service=service or title.removeprefix("coffer-")))
    return app


kit_app.base_app = base_app
