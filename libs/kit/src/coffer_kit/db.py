"""Database engine chosen by URL (SQLite file or PostgreSQL) and the session dependency."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import event, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlmodel import Session, create_engine
from starlette.concurrency import run_in_threadpool

from coffer_kit.errors import unavailable
from coffer_kit.tracing import instrument_engine

# Execution option marking a transaction that will write (see the SQLite begin hook below).
WRITE_OPTION = "coffer_write"
_READ_METHODS = {"GET", "HEAD", "OPTIONS"}


def make_engine(url: str, *, pool_size: int = 10) -> Engine:
    """An engine for ``url``; SQLite gets WAL, foreign keys and a busy timeout."""
    if url.startswith("sqlite"):
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30}, pool_pre_ping=False
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
        max_overflow=pool_size,
        pool_timeout=10,
    )
    instrument_engine(engine)
    return engine


def writer(engine: Engine) -> Engine:
    """The same engine, marked so that its transactions take the write lock at BEGIN."""
    return engine.execution_options(**{WRITE_OPTION: True})


def get_session(request: Request) -> Iterator[Session]:
    """The request owns the transaction: commit on success, roll back on error."""
    engine: Engine = request.app.state.engine
    bind = engine if request.method in _READ_METHODS else writer(engine)
    with Session(bind, expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except (OperationalError, DBAPIError) as exc:
            session.rollback()
            if exc.connection_invalidated or isinstance(exc, OperationalError):
                raise unavailable("The database is unavailable.") from exc
            raise
        except BaseException:
            session.rollback()
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
