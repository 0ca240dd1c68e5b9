"""SQLite's group commit: the writes that queue while a transaction commits go in the next one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from coffer_kit.contract.errors import unavailable
from coffer_kit.db.engine import database_down, writer

T = TypeVar("T")

# How many waiting writes one SQLite transaction takes at most: enough to cover the writers
# a busy service has waiting (16 concurrent uploads send at most 16), few enough that one
# slow write does not hold many answers back.
GROUP_COMMIT_MAX = 64


class GroupCommit:
    """Group commit for one SQLite database: writes that queue up while a transaction commits
    are run together in the next one, each in a SAVEPOINT of its own, and committed at once.

    With ``synchronous=FULL`` every commit is an fsync of the WAL, and every write through the
    session dependency also holds the write lock across two worker-thread trips; at 16
    concurrent 4 KiB uploads (two write transactions each) that serialized metadata at ~130
    transactions/s. Here the lock is held for one thread trip and one fsync per *group*.

    The promises stay: a write's answer waits for the COMMIT that holds it (durable, as
    ``synchronous=FULL`` makes every commit); a write that fails is rolled back to its
    savepoint, so none of its changes stay, and the others in the group are unaffected;
    writes run one after another in one transaction, so each sees the ones before it (the
    quota's conditional update stays exact). If the COMMIT itself fails, or the database
    fails under a write, the whole group is rolled back and every write in it fails (503):
    nothing of any of them stays.
    """

    __slots__ = ("_engine", "_flusher", "_lock", "_waiting")

    def __init__(self, engine: Engine, lock: asyncio.Lock) -> None:
        self._engine = writer(engine)
        self._lock = lock
        self._waiting: list[tuple[Callable[[Session], Any], asyncio.Future[Any]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def submit(self, work: Callable[[Session], T]) -> T:
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._waiting.append((work, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        while self._waiting:
            # Writers through the session dependency take turns with whole groups.
            async with self._lock:
                # A writer cancelled before its turn (its client went away) is not run, as one
                # cancelled while it waited for the lock never ran.
                waiting = [(work, future) for work, future in self._waiting if not future.done()]
                group, self._waiting = waiting[:GROUP_COMMIT_MAX], waiting[GROUP_COMMIT_MAX:]
                if not group:
                    continue
                try:
                    outcomes = await run_in_threadpool(self._run, [work for work, _ in group])
                except BaseException as exc:
                    # Nothing of the group committed: every writer in it fails.
                    for _, future in group:
                        if not future.done():
                            future.set_exception(_group_failure(exc))
                    if not isinstance(exc, Exception):
                        raise
                    continue
            for (_, future), (ok, value) in zip(group, outcomes, strict=True):
                if future.done():  # the writer was cancelled (its client went away)
                    continue
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)

    def _run(self, works: list[Callable[[Session], Any]]) -> list[tuple[bool, Any]]:
        """In a worker thread: the group in one transaction, each write in a savepoint.

        Raises (having rolled the whole group back) if the database fails or the commit does.
        """
        outcomes: list[tuple[bool, Any]] = []
        with Session(self._engine, expire_on_commit=False) as session:
            try:
                for work in works:
                    try:
                        with session.begin_nested():
                            outcomes.append((True, work(session)))
                    except DBAPIError as exc:
                        if database_down(exc):
                            raise
                        outcomes.append((False, exc))
                    except Exception as exc:  # noqa: BLE001 - this write's own failure, answered to it
                        outcomes.append((False, exc))
                session.commit()
            except BaseException:
                session.rollback()
                raise
        return outcomes


def _group_failure(exc: BaseException) -> BaseException:
    """What one writer of a group that could not commit gets: 503 if the database failed."""
    if isinstance(exc, DBAPIError):
        failure = unavailable("The database is unavailable.")
        failure.__cause__ = exc
        return failure
    if isinstance(exc, Exception):
        return exc
    return asyncio.CancelledError()


def sqlite_all(engine: Engine, sql: str, values: Any) -> list[Any]:
    """In a worker thread: ``sql`` on a pooled connection, which waits out a lock."""
    connection = engine.raw_connection()
    try:
        return list(connection.cursor().execute(sql, values).fetchall())
    finally:
        connection.close()
