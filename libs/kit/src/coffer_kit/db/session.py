"""The session dependency (the request owns the transaction) and the one-trip read."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Annotated, TypeVar

from fastapi import Depends, Request
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from coffer_kit.contract.errors import unavailable
from coffer_kit.db.database import DatabaseState
from coffer_kit.db.engine import database_down, in_thread, writer
from coffer_kit.state import request_state

_READ_METHODS = {"GET", "HEAD", "OPTIONS"}

T = TypeVar("T")


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


async def get_session(request: Request) -> AsyncIterator[Session]:
    """The request owns the transaction: commit on success, roll back on error.

    Opening a Session touches no database, so it happens on the event loop; only the end of
    the transaction takes a thread (one hop, where a sync dependency would take two).
    """
    database = request_state(request, DatabaseState).database
    write = request.method not in _READ_METHODS
    lock = database.write_lock if write else None
    bind = writer(database.engine) if write else database.engine
    async with database.sessions, lock or contextlib.nullcontext(), _transaction(bind) as session:
        yield session


@contextlib.asynccontextmanager
async def _transaction(bind: Engine) -> AsyncIterator[Session]:
    session = Session(bind, expire_on_commit=False)
    try:
        yield session
    except DBAPIError as exc:
        await run_in_threadpool(_rollback, session)
        if database_down(exc):
            raise unavailable("The database is unavailable.") from exc
        raise
    except PoolTimeout as exc:
        await run_in_threadpool(_rollback, session)
        raise unavailable("Every database connection is busy; try again.", retry_after=1) from exc
    except BaseException:
        await run_in_threadpool(_rollback, session)
        raise
    try:
        await run_in_threadpool(_commit, session)
    except DBAPIError as exc:
        raise unavailable("The database is unavailable.") from exc


async def run_read(engine: Engine, work: Callable[[Session], T]) -> T:
    """``work(session)`` in one read transaction and one worker-thread trip.

    For hot read endpoints: the session dependency costs a second trip to end the
    transaction. A database that is down answers 503, as through the dependency.
    """

    def run() -> T:
        with Session(engine, expire_on_commit=False) as session:
            return work(session)

    return await in_thread(run)


# scope="function": commit before the response is sent, so a failed commit is never a 2xx.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
