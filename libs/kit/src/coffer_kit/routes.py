"""Lean routes: declared FastAPI routes whose endpoint does its own request parsing (issue 28).

FastAPI's handler around an endpoint (solving its dependencies, one ``Depends`` object each,
validating its parameters, its exception and exit-stack layers) cost more CPU than a hot
read does: ``GET /api/assets/:id``'s four dependencies cost several times the same route
through :class:`LeanRoute` (a loop in one process; bench/results/journal.md, "Figures moved
out of code comments"). A lean route's
endpoint is called with the request and its path parameters, reads what else it needs
(headers, a JSON body with :func:`json_body`) once, and answers a ``Response`` itself.

It stays a declared route: the router selects it, so the request id, the access line, the
request metrics, the error envelope and tracing see it like any other, with tracing on or
off; and the OpenAPI document is generated from it (its path parameters from the signature,
its body and security from ``openapi_extra``). There is no second implementation to keep
equal to it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from coffer_kit.contract.errors import validation_error

ModelT = TypeVar("ModelT", bound=BaseModel)


class LeanRoute(APIRoute):
    """A route whose endpoint is ``async def f(request: Request, <path parameters: str>) ->
    Response``, called without FastAPI's dependency solver.

    Such an endpoint declares no dependency, query, header, cookie or body parameter: it
    would never be run or checked, so declaring one is refused when the route is built.
    Dependencies given where its router is included are not run either: include a router of
    lean routes without any, and have the endpoint call what they did (authentication, the
    internal token) itself, first.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        _check_lean(self)
        endpoint = self.endpoint

        async def handler(request: Request) -> Response:
            response: Response = await endpoint(request, **request.path_params)
            return response

        return handler


def _check_lean(route: APIRoute) -> None:
    dependant = route.dependant
    name = f"{route.name} ({', '.join(sorted(route.methods or ()))} {route.path})"
    if not inspect.iscoroutinefunction(route.endpoint):
        raise TypeError(f"lean route {name}: the endpoint must be async")
    if dependant.request_param_name != "request":
        raise TypeError(f"lean route {name}: the endpoint takes the request as 'request'")
    unsolved = {
        "dependencies": dependant.dependencies,
        "query parameters": dependant.query_params,
        "headers": dependant.header_params,
        "cookies": dependant.cookie_params,
        "a body": dependant.body_params,
    }
    for what, declared in unsolved.items():
        if declared:
            raise TypeError(f"lean route {name}: declares {what}, which a lean route never solves")
    for param in dependant.path_params:
        if param.field_info.annotation is not str:
            raise TypeError(f"lean route {name}: path parameter {param.name!r} must be a str")


async def json_body(request: Request, model: type[ModelT]) -> ModelT:
    """The request's JSON body as ``model``, refused as FastAPI refuses a declared body (the
    contract's 400, naming the first bad field)."""
    body = await request.body()
    if not body:  # FastAPI: a required body that is absent
        raise validation_error([{"type": "missing", "loc": ("body",), "msg": "Field required"}])
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise validation_error(
            [{**error, "loc": ("body", *error["loc"])} for error in exc.errors()]
        ) from None


def json_request_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` describing a lean route's JSON body, which its signature does not."""
    schema = model.model_json_schema(by_alias=True)
    if "$defs" in schema:
        raise ValueError(f"{model.__name__} nests models: describe its body in the document by hand")
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}
