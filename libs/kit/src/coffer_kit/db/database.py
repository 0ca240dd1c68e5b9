"""A service's database: its engine, its SQLite writers' queue and its event-loop connections
(Database), and the typed state and dependency that carry it."""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from fastapi import Depends, Request
from sqlalchemy.engine import Engine, make_url
from sqlmodel import Session

from coffer_kit.contract.errors import unavailable
from coffer_kit.db.engine import DatabaseBudget, in_thread, make_engine, without_nul
from coffer_kit.db.postgres import (
    KEYED_READ_WAIT_SECONDS,
    PgReads,
    PgTransaction,
    loop_pool,
)
from coffer_kit.db.sqlite import GroupCommit, sqlite_all
from coffer_kit.state import ServiceState, SettingsT, request_state

if TYPE_CHECKING:  # psycopg is imported where PostgreSQL is used: the embedded default never loads it
    from psycopg_pool import AsyncConnectionPool

T = TypeVar("T")


class Database:
    """A service's engine, and the queue its SQLite writers wait in (None on other databases).

    SQLite has one writer at a time. Waiting in its busy handler sleeps in growing steps (up
    to 100 ms) instead of waking when the lock is free, and holds a worker thread meanwhile:
    with as many waiting writers as threads, the holder cannot get a thread to commit until a
    waiter times out. Writers of this process therefore queue on ``write_lock``, on the event
    loop, and the next one starts the moment the previous commits. Other processes (the CLI,
    a second worker) still meet the busy handler.

    ``write`` is the path of hot writes: on SQLite the group commit (see ``GroupCommit``), on
    PostgreSQL a transaction on the event loop when the caller gives one (:class:`PgTransaction`,
    through a pool of at most ``LOOP_WRITE_CONNECTIONS`` psycopg async connections, opened by
    the first such write). ``fetch_all`` runs a :class:`KeyedRead` on the event loop: on
    SQLite files through one more connection, opened by the first read (auth never makes
    one), on PostgreSQL through a pool of at most ``KEYED_READ_CONNECTIONS`` psycopg async
    connections, opened alike.
    """

    __slots__ = (
        "_group",
        "_loop_reader",
        "_loop_url",
        "_pg_pool",
        "_pg_reads",
        "_pg_write_pool",
        "budget",
        "engine",
        "sessions",
        "write_lock",
    )

    def __init__(
        self, engine: Engine, loop_url: str | None = None, budget: DatabaseBudget | None = None
    ) -> None:
        self.engine = engine
        self.budget = budget or DatabaseBudget()
        self._loop_url = loop_url
        self._loop_reader: sqlite3.Connection | None = None
        self._pg_pool: AsyncConnectionPool | None = None
        self._pg_write_pool: AsyncConnectionPool | None = None
        self._pg_reads: PgReads | None = None
        # The requests in a transaction at once (the session dependency): no more than the pool
        # has connections, the others waiting on the event loop. A request that waited for a
        # connection in a worker thread held the thread, and with more such requests than the
        # pool has connections (a pool smaller than the thread pool: the chart's, per replica)
        # the requests that held the connections found no thread to finish in; every waiter
        # failed at the pool's timeout (64 writes at once on a pool of 2: 40 failed after 10 s).
        self.sessions = asyncio.Semaphore(self.budget.pool)
        self.write_lock = asyncio.Lock() if engine.dialect.name == "sqlite" else None
        self._group = GroupCommit(engine, self.write_lock) if self.write_lock is not None else None

    @classmethod
    def open(
        cls,
        url: str,
        *,
        pool_size: int | None = None,
        durable: bool = True,
        budget: DatabaseBudget | None = None,
    ) -> Database:
        """The database at ``url`` within ``budget`` (default: :class:`DatabaseBudget`'s);
        ``pool_size`` overrides the budget's pool."""
        budget = budget or DatabaseBudget()
        if pool_size is not None:
            budget = DatabaseBudget(
                pool=pool_size, reads=budget.reads, writes=budget.writes, pooler=budget.pooler
            )
        engine = make_engine(url, pool_size=budget.pool, durable=durable, pooler=budget.pooler)
        on_disk = engine.dialect.name == "sqlite" and engine.url.database not in (None, "", ":memory:")
        return cls(engine, url if on_disk else None, budget)

    async def fetch_all(self, sql: str, values: Any) -> list[Any]:
        """Every row ``sql`` answers, as the driver gives them (see :class:`KeyedRead`)."""
        if self.engine.dialect.name == "postgresql":
            return await self._pg_all(sql, values)
        try:
            reader = self._sqlite_loop_reader()
            if reader is not None:
                # Stepped to its end (fetchall): no statement, so no snapshot, stays open.
                return reader.execute(sql, values).fetchall()
        except sqlite3.OperationalError:  # busy: wait in a thread, as every other statement does
            pass
        return await in_thread(functools.partial(sqlite_all, self.engine, sql, values))

    def _sqlite_loop_reader(self) -> sqlite3.Connection | None:
        """The event loop's own sqlite3 connection; None for a database not in a file (tests'
        in-memory ones), whose reads take a worker thread."""
        if self._loop_reader is None and self._loop_url is not None:
            path = make_url(self._loop_url).database or ""
            # Autocommit (isolation_level None), never waits for a lock; the engine set WAL.
            self._loop_reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._loop_reader.execute("PRAGMA busy_timeout=0")
        return self._loop_reader

    async def _pg_all(self, sql: str, values: Any) -> list[Any]:
        from psycopg import OperationalError as PgOperationalError
        from psycopg_pool import PoolTimeout

        if self._pg_pool is None or self._pg_reads is None:
            prepare = self.budget.prepare
            self._pg_pool = loop_pool(self.engine, "coffer-keyed-read", self.budget.reads, prepare=prepare)
            self._pg_reads = PgReads(self._pg_pool, prepare=prepare)
            await self._pg_pool.open(wait=False)
        values = without_nul(values)
        for attempt in (1, 2):
            try:
                return await self._pg_reads.fetch_all(sql, values)
            except PoolTimeout as exc:
                raise unavailable("The database is unavailable.") from exc
            except PgOperationalError as exc:
                # Pooled connections the server closed (a restart) fail their next statement:
                # the pool drops this one and checks the others; a read is safe to send again.
                if attempt == 2:
                    raise unavailable("The database is unavailable.") from exc
                await self._pg_pool.check()
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._loop_reader is not None:
            self._loop_reader.close()
            self._loop_reader = None
        self.engine.dispose()

    async def aclose(self) -> None:
        """``close``, and the pools of the event loop's PostgreSQL connections."""
        if self._pg_pool is not None:
            await self._pg_pool.close()
            self._pg_pool = self._pg_reads = None
        if self._pg_write_pool is not None:
            await self._pg_write_pool.close()
            self._pg_write_pool = None
        self.close()

    async def write(
        self,
        work: Callable[[Session], T],
        on_loop: Callable[[PgTransaction], Awaitable[T | None]] | None = None,
    ) -> T:
        """``work(session)`` in a write transaction that has committed when this returns.

        All or nothing for ``work``: if it raises, none of its changes stay, and the error is
        raised here. A database that is down, or a commit that fails, answers 503, as through
        the session dependency. On SQLite, writes that wait together commit together (one
        fsync of the WAL for all of them); elsewhere each is its own transaction, in one
        worker-thread trip.

        On PostgreSQL, ``on_loop`` (a hot write's common case, the same change as ``work``)
        is tried first, on the event loop: see :class:`PgTransaction`. What it answers is
        committed and returned; if it answers None, or a statement of it fails, its
        transaction is rolled back and ``work`` runs instead, so the uncommon cases (a first
        write, a refusal to explain, a constraint) keep one implementation.
        """
        if self._group is not None:
            return await self._group.submit(work)
        if on_loop is not None and self.engine.dialect.name == "postgresql":
            done = await self._pg_write(on_loop)
            if done is not None:
                return done

        def run() -> T:
            with Session(self.engine, expire_on_commit=False) as session, session.begin():
                return work(session)

        return await in_thread(run)

    async def _pg_write(self, on_loop: Callable[[PgTransaction], Awaitable[T | None]]) -> T | None:
        """``on_loop`` in a transaction on one of the event loop's connections, committed; None
        when ``work`` should run instead (nothing of ``on_loop`` stays then)."""
        from psycopg import Error as PgError
        from psycopg import OperationalError as PgOperationalError
        from psycopg_pool import PoolTimeout

        if self._pg_write_pool is None:
            self._pg_write_pool = loop_pool(
                self.engine, "coffer-loop-write", self.budget.writes, prepare=self.budget.prepare
            )
            await self._pg_write_pool.open(wait=False)
        pool = self._pg_write_pool
        transaction: PgTransaction | None = None
        try:
            async with pool.connection(timeout=KEYED_READ_WAIT_SECONDS) as connection:
                transaction = PgTransaction(connection, self.engine.dialect, prepare=self.budget.prepare)
                try:
                    done = await on_loop(transaction)
                    if done is not None and transaction.open:
                        await transaction.send(commit=True)
                finally:
                    await transaction.end()
                return done
        except PoolTimeout as exc:
            raise unavailable("The database is unavailable.") from exc
        except PgOperationalError as exc:
            if transaction is not None and transaction.commit_sent:
                # Whether it committed is unknown: the caller is told, as a failed commit is.
                raise unavailable("The database is unavailable.") from exc
            # Nothing committed. A connection the server closed (a restart) fails its next
            # statement: the pool drops it and checks the others, and ``work`` runs through
            # the engine, whose pool pings first (503 if the database is down).
            await pool.check()
            return None
        except PgError:
            return None  # a statement's own failure, rolled back: ``work`` meets it and answers it


@dataclass(slots=True)
class DatabaseState(ServiceState[SettingsT]):
    """The typed state of a service that owns a database (auth, metadata)."""

    database: Database


async def database_of(request: Request) -> Database:
    """The service's database (a dependency: async, so it costs no thread-pool trip)."""
    return request_state(request, DatabaseState).database


DatabaseDep = Annotated[Database, Depends(database_of)]
