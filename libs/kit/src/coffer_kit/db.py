"""Database engine chosen by URL (SQLite file or PostgreSQL) and the session dependency."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, TypeVar

from fastapi import Depends, Request
from sqlalchemy import event, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.pool import QueuePool
from sqlmodel import Session, create_engine
from starlette.concurrency import run_in_threadpool

from coffer_kit.errors import unavailable
from coffer_kit.tracing import instrument_engine

# Execution option marking a transaction that will write (see the SQLite begin hook below).
WRITE_OPTION = "coffer_write"
_READ_METHODS = {"GET", "HEAD", "OPTIONS"}


# As many pooled connections as the thread pool has threads (anyio's default is 40): a
# connection opened past the pool's size is closed again after one use, and opening one costs
# more than the query it serves.
POOL_SIZE = 40


def make_engine(url: str, *, pool_size: int = POOL_SIZE) -> Engine:
    """An engine for ``url``; SQLite gets WAL, foreign keys and a busy timeout."""
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            poolclass=QueuePool,
            pool_size=pool_size,
            max_overflow=0,
            pool_timeout=30,
        )

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        # pysqlite's own transaction handling starts transactions late and cannot take the
        # write lock up front. Writers BEGIN IMMEDIATE, so two writers queue on busy_timeout
        # instead of failing when a read transaction tries to upgrade; readers stay deferred.
        @event.listens_for(engine, "connect")
        def _no_autobegin(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
            dbapi_conn.isolation_level = None

        @event.listens_for(engine, "begin")
        def _begin(conn) -> None:  # type: ignore[no-untyped-def]
            write = conn.get_execution_options().get(WRITE_OPTION, False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        instrument_engine(engine)
        return engine
    engine = create_engine(
        url,
        pool_pre_ping=True,
        pool_size=pool_size,
        max_overflow=0,
        pool_timeout=10,
    )
    instrument_engine(engine)
    return engine


@functools.cache
def writer(engine: Engine) -> Engine:
    """The same engine, marked so that its transactions take the write lock at BEGIN."""
    return engine.execution_options(**{WRITE_OPTION: True})


def _commit(session: Session) -> None:
    try:
        session.commit()
    finally:
        session.close()


def _rollback(session: Session) -> None:
    try:
        session.rollback()
    finally:
        session.close()


def _sqlite_write_lock(request: Request, engine: Engine) -> asyncio.Lock | None:
    """The app's queue for SQLite write transactions (None on other databases).

    SQLite has one writer at a time. Waiting in its busy handler sleeps in growing steps (up
    to 100 ms) instead of waking when the lock is free, and holds a worker thread meanwhile:
    with as many waiting writers as threads, the holder cannot get a thread to commit until a
    waiter times out. Writers of this process therefore queue here, on the event loop, and
    the next one starts the moment the previous commits. Other processes (the CLI, a second
    worker) still meet the busy handler.
    """
    if engine.dialect.name != "sqlite":
        return None
    state = request.app.state
    lock: asyncio.Lock | None = getattr(state, "sqlite_write_lock", None)
    if lock is None:
        lock = state.sqlite_write_lock = asyncio.Lock()
    return lock


async def get_session(request: Request) -> AsyncIterator[Session]:
    """The request owns the transaction: commit on success, roll back on error.

    Opening a Session touches no database, so it happens on the event loop; only the end of
    the transaction takes a thread (one hop, where a sync dependency would take two).
    """
    engine: Engine = request.app.state.engine
    write = request.method not in _READ_METHODS
    lock = _sqlite_write_lock(request, engine) if write else None
    bind = writer(engine) if write else engine
    async with lock or contextlib.nullcontext(), _transaction(bind) as session:
        yield session


def _database_down(exc: DBAPIError) -> bool:
    """Whether an error means the database could not be reached (503), not a bad statement."""
    return exc.connection_invalidated or isinstance(exc, OperationalError)


@contextlib.asynccontextmanager
async def _transaction(bind: Engine) -> AsyncIterator[Session]:
    session = Session(bind, expire_on_commit=False)
    try:
        yield session
    except DBAPIError as exc:
        await run_in_threadpool(_rollback, session)
        if _database_down(exc):
            raise unavailable("The database is unavailable.") from exc
        raise
    except BaseException:
        await run_in_threadpool(_rollback, session)
        raise
    try:
        await run_in_threadpool(_commit, session)
    except DBAPIError as exc:
        raise unavailable("The database is unavailable.") from exc


T = TypeVar("T")


async def run_read(engine: Engine, work: Callable[[Session], T]) -> T:
    """``work(session)`` in one read transaction and one worker-thread trip.

    For hot read endpoints: the session dependency costs a second trip to end the
    transaction. A database that is down answers 503, as through the dependency.
    """

    def run() -> T:
        with Session(engine, expire_on_commit=False) as session:
            return work(session)

    try:
        return await run_in_threadpool(run)
    except DBAPIError as exc:
        if _database_down(exc):
            raise unavailable("The database is unavailable.") from exc
        raise


# scope="function": commit before the response is sent, so a failed commit is never a 2xx.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]


def database_check(engine_of: Callable[[], Engine]) -> Callable[[], Awaitable[None]]:
    """A readiness check that runs ``SELECT 1`` on the engine ``engine_of()`` returns."""

    def ping() -> None:
        with engine_of().connect() as conn:
            conn.execute(text("SELECT 1"))

    async def check() -> None:
        await run_in_threadpool(ping)

    return check
