"""Fast routes (coffer_kit.fastpath) answer exactly as the declared route would, and
point_read (coffer_kit.db) reads on the event loop, handing a locked read to a thread."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi import APIRouter, FastAPI, Header, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import REGISTRY
from pydantic import BaseModel, Field
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError

from coffer_kit.app import base_app
from coffer_kit.db import Database, PointQuery, point_read
from coffer_kit.errors import forbidden, not_found
from coffer_kit.fastpath import FastRoutes, fast_route, json_body
from coffer_testkit.pytest_plugin import new_database_url


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


router = APIRouter(prefix="/things")


@router.get("/{thing_id}")
async def get_thing(thing_id: str, x_key: str | None = Header(default=None)) -> Response:
    if x_key != "open":
        raise forbidden("No key.")
    if thing_id == "missing":
        raise not_found(f"Thing {thing_id} does not exist.")
    return JSONResponse({"id": thing_id})


class ThingIn(BaseModel):
    name: str = Field(min_length=1)
    size: int = 0


@router.post("/{thing_id}")
async def post_thing(thing_id: str, body: ThingIn) -> Response:
    return JSONResponse({"id": thing_id, "name": body.name, "size": body.size}, status_code=201)


async def post_thing_fast(request: Request) -> Response:
    return await post_thing(request.path_params["thing_id"], await json_body(request, ThingIn))


@router.delete("/{thing_id}")
async def delete_thing(thing_id: str) -> dict[str, str]:
    return {"deleted": thing_id}


async def get_thing_fast(request: Request) -> Response:
    return await get_thing(request.path_params["thing_id"], request.headers.get("x-key"))


def _app(*, fast: bool) -> FastAPI:
    app = base_app("coffer-fasttest")
    app.include_router(router)
    if fast:
        fast_route(app, router, "/things/{thing_id}", get_thing_fast)
        fast_route(app, router, "/things/{thing_id}", post_thing_fast, method="POST")
    return app


CASES: list[tuple[str, str, dict[str, str]]] = [
    ("GET", "/things/a%20b", {"x-key": "open"}),
    ("GET", "/things/missing", {"x-key": "open"}),
    ("GET", "/things/a", {}),
    ("GET", "/things/a/", {"x-key": "open"}),
    ("HEAD", "/things/a", {"x-key": "open"}),
    ("DELETE", "/things/a", {}),
    ("PUT", "/things/a", {}),
]
# A body FastAPI would take, then bodies it refuses (bad JSON, a field missing, too short, of
# the wrong type, none at all); each must be refused alike, with the same envelope.
POSTS = ['{"name": "x", "size": 2}', '{"name": "x"', "{}", '{"name": ""}', '{"name": "x", "size": "two"}', ""]
CASES += [("POST", "/things/a", {"content-type": "application/json", "body": body}) for body in POSTS]
CASES += [("POST", "/things/a/", {"content-type": "application/json", "body": POSTS[0]})]


async def _answers(app: FastAPI) -> list[tuple[int, list[tuple[str, str]], bytes]]:
    answers = []
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        for method, path, headers in CASES:
            sent = {**headers, "x-request-id": "req-1"}
            body = sent.pop("body", "").encode()
            response = await client.request(method, path, headers=sent, content=body)
            answers.append((response.status_code, list(response.headers.items()), response.content))
    return answers


@pytest.mark.anyio
async def test_a_fast_route_answers_as_the_declared_route() -> None:
    fast = _app(fast=True)
    (layer,) = [m for m in fast.user_middleware if m.cls is FastRoutes]
    assert [(method, route.path) for method, route, _ in layer.kwargs["fast_routes"]] == [
        ("GET", "/things/{thing_id}"),
        ("POST", "/things/{thing_id}"),
    ]
    assert await _answers(fast) == await _answers(_app(fast=False))


@pytest.mark.anyio
async def test_a_fast_route_is_logged_and_counted_under_its_template(
    caplog: pytest.LogCaptureFixture,
) -> None:
    labels = {"service": "fasttest", "route": "/things/{thing_id}", "method": "GET", "status": "404"}
    before = REGISTRY.get_sample_value("coffer_http_requests_total", labels) or 0
    caplog.set_level(logging.INFO, logger="coffer.access")
    transport = httpx.ASGITransport(app=_app(fast=True))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.get("/things/missing", headers={"x-key": "open"})
    assert response.json()["error"]["requestId"] == response.headers["x-request-id"]
    assert REGISTRY.get_sample_value("coffer_http_requests_total", labels) == before + 1
    (line,) = [r for r in caplog.records if r.name == "coffer.access"]
    assert (line.__dict__["route"], line.__dict__["status"]) == ("/things/{thing_id}", 404)


def test_a_fast_route_must_be_declared() -> None:
    with pytest.raises(LookupError):
        fast_route(_app(fast=False), router, "/things", get_thing_fast)


@pytest.fixture
def database(tmp_path: Path) -> Any:
    database = Database.open(f"sqlite:///{tmp_path / 'point.db'}")
    with database.engine.begin() as connection:
        connection.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)"))
        connection.execute(text("INSERT INTO t VALUES (1, 'one')"))
    yield database
    database.close()


def _read(connection: Connection) -> tuple[str, str]:
    value = connection.execute(text("SELECT v FROM t WHERE id = 1")).scalar_one()
    return value, threading.current_thread().name


@pytest.mark.anyio
async def test_a_point_read_runs_on_the_event_loop_and_sees_every_commit(database: Database) -> None:
    assert await point_read(database, _read) == ("one", threading.current_thread().name)
    # The loop's connection stays open between reads: each read must start a fresh snapshot.
    with database.engine.begin() as connection:
        connection.execute(text("UPDATE t SET v = 'uno' WHERE id = 1"))
    assert await point_read(database, _read) == ("uno", threading.current_thread().name)


@pytest.mark.anyio
async def test_a_point_read_that_meets_a_lock_runs_again_in_a_thread(database: Database) -> None:
    loop_thread = threading.current_thread().name
    attempts: list[str] = []

    def locked_on_the_loop(connection: Connection) -> tuple[str, str]:
        attempts.append(threading.current_thread().name)
        if threading.current_thread().name == loop_thread:
            raise OperationalError("SELECT", {}, Exception("database is locked"))
        return _read(connection)

    value, thread = await point_read(database, locked_on_the_loop)
    assert value == "one" and thread != loop_thread
    assert attempts[0] == loop_thread and len(attempts) == 2


@pytest.mark.anyio
async def test_without_a_loop_reader_a_point_read_takes_a_thread(database: Database) -> None:
    value, thread = await point_read(Database(database.engine), _read)
    assert value == "one" and thread != threading.current_thread().name


_things = sa.Table(
    "things",
    sa.MetaData(),
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("made_at", sa.DateTime),
    sa.Column("size", sa.BigInteger),
    sa.Column("note", sa.String, nullable=True),
)
THING = PointQuery(sa.select(_things).where(_things.c.id == sa.bindparam("thing_id")))


def _things_database(url: str) -> Database:
    database = Database.open(url)
    _things.metadata.create_all(database.engine)
    with database.engine.begin() as connection:
        connection.execute(
            _things.insert(),
            [
                {"id": "a", "made_at": datetime(2026, 11, 24, 4, 5, 6, 789000), "size": 2**40, "note": "ünï"},
                {"id": "b", "made_at": datetime(2026, 1, 1), "size": 0, "note": None},
            ],
        )
    return database


@pytest.fixture(params=["sqlite", "postgresql"])
def things(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    database = _things_database(new_database_url(request, request.param, tmp_path, "things"))
    yield database
    database.close()


@pytest.mark.anyio
async def test_a_point_query_answers_what_sqlalchemy_answers(things: Database) -> None:
    for thing_id in ("a", "b", "nothing"):
        with things.engine.connect() as connection:
            expected = connection.execute(THING.statement, {"thing_id": thing_id}).first()
        got = await THING.first(things, {"thing_id": thing_id})
        assert (got is None) == (expected is None)
        if expected is not None:
            assert tuple(got) == tuple(expected) and got._fields == tuple(expected._fields)
            assert isinstance(got.made_at, datetime)
        # Straight on sqlite3 on the event loop (its own row type); through SQLAlchemy otherwise.
        on_the_loop = things.engine.dialect.name == "sqlite"
        assert got is None or isinstance(got, THING.row) == on_the_loop


@pytest.mark.anyio
async def test_a_point_query_sees_every_commit_and_holds_no_snapshot(tmp_path: Path) -> None:
    database = _things_database(f"sqlite:///{tmp_path / 'things.db'}")
    try:
        assert (await THING.first(database, {"thing_id": "b"})).size == 0
        with database.engine.begin() as connection:
            connection.execute(_things.update().where(_things.c.id == "b").values(size=7))
            connection.execute(_things.delete().where(_things.c.id == "a"))
        assert (await THING.first(database, {"thing_id": "b"})).size == 7
        assert await THING.first(database, {"thing_id": "a"}) is None
        # No read left open on the loop's connection: a checkpoint can truncate the whole WAL.
        with database.engine.connect() as connection:
            busy, _, _ = connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").one()
        assert busy == 0
    finally:
        database.close()


@pytest.mark.anyio
async def test_a_point_query_that_meets_a_lock_waits_in_a_thread(tmp_path: Path) -> None:
    path = tmp_path / "things.db"
    database = _things_database(f"sqlite:///{path}")
    database.engine.dispose()  # no connection open: another process can take the file whole
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("PRAGMA locking_mode=EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")  # no other connection can read now, WAL or not
        task = asyncio.create_task(THING.first(database, {"thing_id": "a"}))
        # Refused at once on the loop, the read waits in a worker thread on a pooled connection.
        while database.engine.pool.checkedout() == 0:  # type: ignore[attr-defined]
            assert not task.done(), task
            await asyncio.sleep(0.01)
        holder.execute("ROLLBACK")
        holder.close()
        row = await task
        assert row.id == "a" and not isinstance(row, THING.row)
        # The lock gone, the next read is the loop's again.
        assert isinstance(await THING.first(database, {"thing_id": "a"}), THING.row)
    finally:
        holder.close()
        database.close()
