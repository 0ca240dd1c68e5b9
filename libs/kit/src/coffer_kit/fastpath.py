"""Hot routes answered without FastAPI's routing and dependency solving (issue 16).

FastAPI spends more CPU on a request than a hot read does: resolving a route through the
included routers, solving its dependencies (one ``Depends`` object each, cached per
request) and wrapping the endpoint in its exception and exit-stack layers took about a
quarter of edge's and metadata's busy time for ``GET /api/assets/:id`` (docs/performance.md).

:func:`fast_route` answers one method of a declared ``APIRoute`` from a pure ASGI layer placed inside
the app's own middleware, so the request id, the access log line and the request metrics
see the request exactly as before (``scope["route"]`` is the declared route). The
route stays declared as it was: the OpenAPI document is built from it, and it answers
whenever the fast layer does not (other methods, a ``root_path``, tracing on). The handler
is given the request and answers a response; a :class:`~coffer_kit.errors.CofferError` it
raises becomes the contract's envelope through the same function as FastAPI's handler.

With tracing on, FastAPI's own telemetry names the server span after the route it selects,
so no fast route is installed then: traced requests take the declared route unchanged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from fastapi import FastAPI
from fastapi.routing import APIRoute, APIRouter
from pydantic import BaseModel, ValidationError
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from coffer_kit.errors import CofferError, error_response, validation_error
from coffer_kit.tracing import tracing_enabled

FastHandler = Callable[[Request], Awaitable[Response]]
ModelT = TypeVar("ModelT", bound=BaseModel)


class FastRoutes:
    """A middleware inside the app's own: a request whose method and path match a fast route
    is answered here."""

    def __init__(self, app: ASGIApp, fast_routes: list[tuple[str, APIRoute, FastHandler]]) -> None:
        self.app = app
        self.routes = fast_routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A root_path changes what the router matches against: leave that to the router.
        if scope["type"] == "http" and not scope.get("root_path"):
            path, method = scope["path"], scope["method"]
            for route_method, route, handler in self.routes:
                if route_method != method:
                    continue
                match = route.path_regex.match(path)
                if match is not None:
                    convertors = route.param_convertors
                    scope["path_params"] = {
                        name: convertors[name].convert(value) for name, value in match.groupdict().items()
                    }
                    scope["route"] = route
                    scope["endpoint"] = route.endpoint
                    request = Request(scope, receive)
                    try:
                        response = await handler(request)
                    except CofferError as exc:
                        response = error_response(request, exc)
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def _route(router: APIRouter, method: str, path: str) -> APIRoute:
    for route in router.routes:
        if isinstance(route, APIRoute) and route.path == path and method in (route.methods or ()):
            return route
    raise LookupError(f"no {method} {path} in the router")


def fast_route(app: FastAPI, router: APIRouter, path: str, handler: FastHandler, method: str = "GET") -> None:
    """Answer ``method path`` (a route of ``router``, declared with its full path: the router
    carries its prefix, and is included without one) with ``handler`` ahead of FastAPI.

    ``handler`` must do what the route's dependencies do (authentication, the internal
    token): the fast layer adds only the path parameters and the error envelope. The route
    must be the first the app's router would select for that method on its paths.
    """
    if tracing_enabled():
        return
    route = _route(router, method, path)
    if app.middleware_stack is not None:
        raise RuntimeError("fast routes are added before the app serves its first request")
    for middleware in app.user_middleware:
        routes = middleware.kwargs.get("fast_routes")
        if isinstance(routes, list):
            routes.append((method, route, handler))
            return
    # Appended, so inside the request id, access log and error guard (add_middleware would
    # put it outermost). A middleware appended after it (edge's dashboard guard) sits inside
    # and never sees a fast route's request; it must be one that would only pass it on.
    app.user_middleware.append(Middleware(FastRoutes, fast_routes=[(method, route, handler)]))


async def json_body(request: Request, model: type[ModelT]) -> ModelT:
    """The request's JSON body as ``model``, for a fast route's handler: refused as FastAPI
    refuses the declared route's body (the contract's 400, naming the first bad field)."""
    body = await request.body()
    if not body:  # FastAPI: a required body that is absent
        raise validation_error([{"type": "missing", "loc": ("body",), "msg": "Field required"}])
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise validation_error(
            [{**error, "loc": ("body", *error["loc"])} for error in exc.errors()]
        ) from None
