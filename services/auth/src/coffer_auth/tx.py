"""Short transactions for the endpoints that hash passwords.

Those endpoints must not hold a write transaction (on SQLite: the database's one write lock)
through a 140 ms argon2 computation, so they read, hash outside any transaction, then write.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from coffer_kit.contract.errors import unavailable
from coffer_kit.db import run_read, writer

T = TypeVar("T")

read = run_read


async def write(engine: Engine, work: Callable[[Session], T]) -> T:
    """``work(session)`` in one write transaction, committed before it returns."""

    def run() -> T:
        with Session(writer(engine), expire_on_commit=False) as session:
            result = work(session)
            session.commit()
            return result

    try:
        return await run_in_threadpool(run)
    except DBAPIError as exc:
        if exc.connection_invalidated or isinstance(exc, OperationalError):
            raise unavailable("The database is unavailable.") from exc
        raise
