"""Lean routes (coffer_kit.routes): declared routes whose endpoint reads its own request. They
are routed, logged, counted, refused in the contract's envelope and described in the OpenAPI
document like any route; a route that declares what a lean route never solves is refused."""

from __future__ import annotations

import logging
from typing import Annotated, Any

import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import REGISTRY
from pydantic import BaseModel, Field

from coffer_kit.app import base_app
from coffer_kit.contract.errors import forbidden, not_found
from coffer_kit.routes import LeanRoute, json_body, json_request_body


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class ThingIn(BaseModel):
    name: str = Field(min_length=1)
    size: int = 0


lean = APIRouter(prefix="/things", route_class=LeanRoute)
declared = APIRouter(prefix="/declared")


@lean.get("/{thing_id}", openapi_extra={"security": [{"Key": []}]})
async def get_thing(request: Request, thing_id: str) -> Response:
    if request.headers.get("x-key") != "open":
        raise forbidden("No key.")
    if thing_id == "missing":
        raise not_found(f"Thing {thing_id} does not exist.")
    return JSONResponse({"id": thing_id})


@lean.post("/{thing_id}", status_code=201, openapi_extra=json_request_body(ThingIn))
async def post_thing(request: Request, thing_id: str) -> Response:
    body = await json_body(request, ThingIn)
    return JSONResponse({"id": thing_id, "name": body.name, "size": body.size}, status_code=201)


@declared.post("/{thing_id}", status_code=201)
async def post_declared(thing_id: str, body: ThingIn) -> dict[str, Any]:
    return {"id": thing_id, "name": body.name, "size": body.size}


def _app() -> FastAPI:
    app = base_app("coffer-leantest")
    app.include_router(lean)
    app.include_router(declared)
    return app


async def _client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


@pytest.mark.anyio
async def test_a_lean_route_answers_and_refuses_in_the_envelope() -> None:
    async with await _client(_app()) as client:
        ok = await client.get("/things/a%20b", headers={"x-key": "open"})
        assert (ok.status_code, ok.json()) == (200, {"id": "a b"})
        assert ok.headers["x-request-id"]
        for path, headers, status, code in [
            ("/things/missing", {"x-key": "open"}, 404, "not_found"),
            ("/things/a", {}, 403, "forbidden"),
        ]:
            refused = await client.get(path, headers=headers)
            assert refused.status_code == status
            assert refused.json()["error"]["code"] == code
            assert refused.json()["error"]["requestId"] == refused.headers["x-request-id"]
        wrong = await client.put("/things/a")
        assert (wrong.status_code, wrong.json()["error"]["code"]) == (405, "method_not_allowed")
        assert {m.strip() for m in wrong.headers["allow"].split(",")} >= {"GET", "POST"}


# A body FastAPI takes, then bodies it refuses (bad JSON, a field missing, too short, of the
# wrong type, none at all): json_body refuses each as FastAPI refuses a declared body.
POSTS = ['{"name": "x", "size": 2}', '{"name": "x"', "{}", '{"name": ""}', '{"name": "x", "size": "two"}', ""]


@pytest.mark.anyio
@pytest.mark.parametrize("body", POSTS)
async def test_json_body_refuses_what_a_declared_body_refuses(body: str) -> None:
    async with await _client(_app()) as client:
        answers = [
            await client.post(path, content=body.encode(), headers={"content-type": "application/json"})
            for path in ("/things/a", "/declared/a")
        ]
    (lean_answer, declared_answer) = answers
    assert lean_answer.status_code == declared_answer.status_code
    if lean_answer.status_code == 201:
        assert lean_answer.json() == declared_answer.json() == {"id": "a", "name": "x", "size": 2}
        return
    assert lean_answer.status_code == 400
    lean_error, declared_error = (a.json()["error"] for a in answers)
    assert lean_error["code"] == declared_error["code"] == "invalid_request"
    assert lean_error["message"] == declared_error["message"]
    assert lean_error.get("details") == declared_error.get("details")


@pytest.mark.anyio
async def test_a_lean_route_is_logged_and_counted_under_its_template(
    caplog: pytest.LogCaptureFixture,
) -> None:
    labels = {"service": "leantest", "route": "/things/{thing_id}", "method": "GET", "status": "404"}
    before = REGISTRY.get_sample_value("coffer_http_requests_total", labels) or 0
    caplog.set_level(logging.INFO, logger="coffer.access")
    async with await _client(_app()) as client:
        response = await client.get("/things/missing", headers={"x-key": "open"})
    assert response.json()["error"]["requestId"] == response.headers["x-request-id"]
    assert REGISTRY.get_sample_value("coffer_http_requests_total", labels) == before + 1
    (line,) = [r for r in caplog.records if r.name == "coffer.access"]
    assert (line.__dict__["route"], line.__dict__["status"]) == ("/things/{thing_id}", 404)


def test_the_document_describes_a_lean_route() -> None:
    operations = _app().openapi()["paths"]["/things/{thing_id}"]
    (parameter,) = operations["get"]["parameters"]
    assert (parameter["name"], parameter["in"], parameter["required"]) == ("thing_id", "path", True)
    assert operations["get"]["security"] == [{"Key": []}]
    schema = operations["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["name"] and set(schema["properties"]) == {"name", "size"}


async def _dependency() -> str:
    return "x"


def test_a_lean_route_declares_nothing_it_would_not_solve() -> None:
    router = APIRouter(route_class=LeanRoute)

    async def with_dependency(request: Request, x: Annotated[str, Depends(_dependency)]) -> Response:  # noqa: ARG001
        return Response()

    async def with_query(request: Request, q: Annotated[str, Query()]) -> Response:  # noqa: ARG001
        return Response()

    async def with_header(request: Request, x_key: Annotated[str, Header()]) -> Response:  # noqa: ARG001
        return Response()

    async def with_body(request: Request, body: ThingIn) -> Response:  # noqa: ARG001
        return Response()

    async def with_int(request: Request, thing_id: int) -> Response:  # noqa: ARG001
        return Response()

    async def without_request(thing_id: str) -> Response:  # noqa: ARG001
        return Response()

    def not_async(request: Request) -> Response:  # noqa: ARG001
        return Response()

    for endpoint, path in [
        (with_dependency, "/a"),
        (with_query, "/a"),
        (with_header, "/a"),
        (with_body, "/a"),
        (with_int, "/{thing_id}"),
        (without_request, "/{thing_id}"),
        (not_async, "/a"),
    ]:
        with pytest.raises(TypeError, match="lean route"):
            router.add_api_route(path, endpoint, methods=["POST"])
    with pytest.raises(TypeError, match="dependencies"):
        router.add_api_route("/b", get_thing, dependencies=[Depends(_dependency)])
