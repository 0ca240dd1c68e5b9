"""Database engine chosen by URL (SQLite file or PostgreSQL) and the session dependency."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
from collections import namedtuple
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from fastapi import Depends, Request
from sqlalchemy import Select, event, text
from sqlalchemy.engine import Dialect, Engine, make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.pool import QueuePool
from sqlalchemy.sql import ClauseElement
from sqlmodel import Session, create_engine
from starlette.concurrency import run_in_threadpool

from coffer_kit.errors import unavailable
from coffer_kit.state import ServiceState, SettingsT, request_state
from coffer_kit.tracing import instrument_engine

if TYPE_CHECKING:  # psycopg is imported where PostgreSQL is used: the embedded default never loads it
    from psycopg_pool import AsyncConnectionPool

# Execution option marking a transaction that will write (see the SQLite begin hook below).
WRITE_OPTION = "coffer_write"
_READ_METHODS = {"GET", "HEAD", "OPTIONS"}


T = TypeVar("T")

# As many pooled connections as the thread pool has threads (anyio's default is 40): a
# connection opened past the pool's size is closed again after one use, and opening one costs
# more than the query it serves.
POOL_SIZE = 40


# How long a SQLite statement waits for a lock before it fails (milliseconds).
BUSY_TIMEOUT_MS = 30_000

# PostgreSQL connections the event loop keeps for KeyedRead (each read a round trip of tens
# of microseconds: a few serve any rate one process reaches), beside the engine's pool, and
# how long a read waits for one before it answers 503 (the database is down or unreachable).
KEYED_READ_CONNECTIONS = 4
KEYED_READ_WAIT_SECONDS = 5.0
# At most this many KeyedReads sent in one pipeline, and how many must wait behind the groups
# out before another connection takes some (see _PgReads).
KEYED_READ_GROUP_MAX = 32
KEYED_READ_MORE_AT = 8
# PostgreSQL connections the event loop keeps for write transactions (``Database.write``'s
# ``on_loop``), apart from the reads': a write that waits for a row lock never holds a read
# back. Writes of one organization take turns on its usage row anyway.
LOOP_WRITE_CONNECTIONS = 8


def make_engine(
    url: str, *, pool_size: int = POOL_SIZE, busy_timeout_ms: int = BUSY_TIMEOUT_MS, durable: bool = True
) -> Engine:
    """An engine for ``url``; SQLite gets WAL, foreign keys and a busy timeout.

    ``durable=False``: a commit returns before it is on disk (SQLite ``synchronous=NORMAL``,
    PostgreSQL ``synchronous_commit=off``). A crash of the machine or the server may lose the
    last commits, never half of one; only for writers that redo whatever such a loss undoes
    (the webhook dispatcher). On SQLite it then holds the write lock for no flush.
    """
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": busy_timeout_ms / 1000},
            poolclass=QueuePool,
            pool_size=pool_size,
            max_overflow=0,
            pool_timeout=30,
        )

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL" if durable else "PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
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
        **({} if durable else {"connect_args": {"options": "-c synchronous_commit=off"}}),
    )
    event.listen(engine, "before_cursor_execute", _nul_safe, retval=True)
    instrument_engine(engine)
    return engine


def _no_nul(value: Any) -> Any:
    return value.replace("\x00", "\ufffd") if isinstance(value, str) and "\x00" in value else value


def _nul_safe(
    _conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _executemany: bool
) -> tuple[str, Any]:
    """PostgreSQL cannot hold U+0000 in text, and psycopg refuses to send it: an id sent with
    a NUL in it (a path segment, a query parameter) failed as a 500. No stored value can hold
    one (names refuse control characters, ids and keys are made by Coffer), so such a value
    matches nothing once the NUL reads U+FFFD, and the lookup answers 404 as on SQLite."""
    return statement, _without_nul(parameters)


def _without_nul(parameters: Any) -> Any:
    """``parameters`` (a dict or a sequence) with any NUL in a string value as U+FFFD."""
    if isinstance(parameters, dict):
        if any(isinstance(v, str) and "\x00" in v for v in parameters.values()):
            parameters = {k: _no_nul(v) for k, v in parameters.items()}
    elif isinstance(parameters, (list, tuple)) and any(
        isinstance(v, str) and "\x00" in v for v in parameters
    ):
        parameters = type(parameters)(_no_nul(v) for v in parameters)
    return parameters


class Database:
    """A service's engine, and the queue its SQLite writers wait in (None on other databases).

    SQLite has one writer at a time. Waiting in its busy handler sleeps in growing steps (up
    to 100 ms) instead of waking when the lock is free, and holds a worker thread meanwhile:
    with as many waiting writers as threads, the holder cannot get a thread to commit until a
    waiter times out. Writers of this process therefore queue on ``write_lock``, on the event
    loop, and the next one starts the moment the previous commits. Other processes (the CLI,
    a second worker) still meet the busy handler.

    ``write`` is the path of hot writes: on SQLite the group commit (see ``_GroupCommit``), on
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
        "engine",
        "write_lock",
    )

    def __init__(self, engine: Engine, loop_url: str | None = None) -> None:
        self.engine = engine
        self._loop_url = loop_url
        self._loop_reader: sqlite3.Connection | None = None
        self._pg_pool: AsyncConnectionPool | None = None
        self._pg_write_pool: AsyncConnectionPool | None = None
        self._pg_reads: _PgReads | None = None
        self.write_lock = asyncio.Lock() if engine.dialect.name == "sqlite" else None
        self._group = _GroupCommit(engine, self.write_lock) if self.write_lock is not None else None

    @classmethod
    def open(cls, url: str, *, pool_size: int = POOL_SIZE, durable: bool = True) -> Database:
        engine = make_engine(url, pool_size=pool_size, durable=durable)
        on_disk = engine.dialect.name == "sqlite" and engine.url.database not in (None, "", ":memory:")
        return cls(engine, url if on_disk else None)

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
        return await _in_thread(functools.partial(_sqlite_all, self.engine, sql, values))

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
            self._pg_pool = _loop_pool(self.engine, "coffer-keyed-read", KEYED_READ_CONNECTIONS)
            self._pg_reads = _PgReads(self._pg_pool)
            await self._pg_pool.open(wait=False)
        values = _without_nul(values)
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

        return await _in_thread(run)

    async def _pg_write(self, on_loop: Callable[[PgTransaction], Awaitable[T | None]]) -> T | None:
        """``on_loop`` in a transaction on one of the event loop's connections, committed; None
        when ``work`` should run instead (nothing of ``on_loop`` stays then)."""
        from psycopg import Error as PgError
        from psycopg import OperationalError as PgOperationalError
        from psycopg_pool import PoolTimeout

        if self._pg_write_pool is None:
            self._pg_write_pool = _loop_pool(self.engine, "coffer-loop-write", LOOP_WRITE_CONNECTIONS)
            await self._pg_write_pool.open(wait=False)
        pool = self._pg_write_pool
        transaction: PgTransaction | None = None
        try:
            async with pool.connection(timeout=KEYED_READ_WAIT_SECONDS) as connection:
                transaction = PgTransaction(connection, self.engine.dialect)
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


# A statement's outcome in a PgTransaction: the rows it affected, and the rows it answered.
Sent = namedtuple("Sent", ["rowcount", "rows"])


class PgTransaction:
    """A write transaction on one of the event loop's PostgreSQL connections, its statements
    sent in pipelines: ``send`` sends some (the first after a BEGIN) and waits once for all
    their outcomes; ``send(commit=True)`` ends with the COMMIT in the same exchange. ``alone``
    runs one statement as its own transaction instead (a statement that writes several
    tables through data-modifying CTEs is all or nothing), in one exchange.

    Through a Session in a worker thread, every statement, the BEGIN and the COMMIT is a round
    trip of its own, and SQLAlchemy's execution, the thread trip and the pool's ping cost the
    process more CPU than the statements (metadata's upload: two transactions of four and five
    statements; bench/results/journal.md, "What changed this session: the upload's writes on
    PostgreSQL"). Statements are Core statements, compiled once
    (:class:`DriverStatement`) and prepared on each connection the first time they run there.
    """

    __slots__ = ("_connection", "_dialect", "commit_sent", "open")

    def __init__(self, connection: Any, dialect: Dialect) -> None:
        self._connection = connection
        self._dialect = dialect
        self.open = False
        self.commit_sent = False

    async def send(
        self, *statements: tuple[DriverStatement, dict[str, Any]], commit: bool = False
    ) -> list[Sent]:
        """Each statement's outcome, in one exchange with the server; raises psycopg's error if
        one fails (the transaction is rolled back then)."""
        connection = self._connection
        async with connection.pipeline():
            if not self.open:
                await connection.execute("BEGIN", prepare=False)
                self.open = True
            cursors = []
            for statement, params in statements:
                sql, values = statement.values(self._dialect, params)
                cursors.append(await connection.execute(sql, _without_nul(values), prepare=True))
            if commit:
                self.commit_sent = True
                await connection.execute("COMMIT", prepare=False)
        # Leaving the pipeline sent a Sync and read every result.
        self.open = not commit
        return [
            Sent(cursor.rowcount, await cursor.fetchall() if cursor.description else []) for cursor in cursors
        ]

    async def alone(self, statement: DriverStatement, params: dict[str, Any]) -> Sent:
        """One statement as a transaction of its own (the connection is in autocommit mode):
        it has committed when it answers. Only before ``send`` (no transaction open)."""
        assert not self.open, "a statement alone runs outside the transaction"
        sql, values = statement.values(self._dialect, params)
        self.commit_sent = True  # if the connection fails now, whether it committed is unknown
        cursor = await self._connection.execute(sql, _without_nul(values), prepare=True)
        return Sent(cursor.rowcount, await cursor.fetchall() if cursor.description else [])

    async def end(self) -> None:
        """Roll back what is not committed (a failed statement leaves the transaction open)."""
        from psycopg.pq import TransactionStatus

        if self._connection.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
            await self._connection.execute("ROLLBACK", prepare=False)
        self.open = False


# How many waiting writes one SQLite transaction takes at most: enough to cover the writers
# a busy service has waiting (16 concurrent uploads send at most 16), few enough that one
# slow write does not hold many answers back.
GROUP_COMMIT_MAX = 64


class _GroupCommit:
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
                        if _database_down(exc):
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


@dataclass(slots=True)
class DatabaseState(ServiceState[SettingsT]):
    """The typed state of a service that owns a database (auth, metadata)."""

    database: Database


async def database_of(request: Request) -> Database:
    """The service's database (a dependency: async, so it costs no thread-pool trip)."""
    return request_state(request, DatabaseState).database


DatabaseDep = Annotated[Database, Depends(database_of)]


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


async def get_session(request: Request) -> AsyncIterator[Session]:
    """The request owns the transaction: commit on success, roll back on error.

    Opening a Session touches no database, so it happens on the event loop; only the end of
    the transaction takes a thread (one hop, where a sync dependency would take two).
    """
    database = request_state(request, DatabaseState).database
    write = request.method not in _READ_METHODS
    lock = database.write_lock if write else None
    bind = writer(database.engine) if write else database.engine
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


async def run_read(engine: Engine, work: Callable[[Session], T]) -> T:
    """``work(session)`` in one read transaction and one worker-thread trip.

    For hot read endpoints: the session dependency costs a second trip to end the
    transaction. A database that is down answers 503, as through the dependency.
    """

    def run() -> T:
        with Session(engine, expire_on_commit=False) as session:
            return work(session)

    return await _in_thread(run)


async def _in_thread(run: Callable[[], T]) -> T:
    """``run()`` in a worker thread; a database that is down answers 503, as through the
    session dependency."""
    try:
        return await run_in_threadpool(run)
    except DBAPIError as exc:
        if _database_down(exc):
            raise unavailable("The database is unavailable.") from exc
        raise


# A KeyedRead waiting to be sent on PostgreSQL: its SQL, its values, and its answer.
_Job = tuple[str, Any, "asyncio.Future[list[Any]]"]


class _PgReads:
    """KeyedReads on PostgreSQL, grouped: the reads that arrive while others are on their way
    go together in one pipeline, on one connection, in the order they came.

    A read alone costs its process more CPU in psycopg's and asyncio's waiting for the answer
    than in the statement; in a pipeline each read costs a fraction of that, and metadata's
    asset GET at 32 connections less CPU a request, more requests a second
    (bench/results/journal.md, "What changed this evening: the asset GET's read on
    PostgreSQL, pipelined").

    A read that comes while none is out is sent at once, alone. One connection carries the
    reads while it keeps up; another of the pool's takes some when ``KEYED_READ_MORE_AT``
    wait behind those out (a slow read, a burst), up to ``KEYED_READ_CONNECTIONS``.

    Each read still answers on its own: a read whose statement fails gets its error and the
    others their rows (the pipeline stops at the failure, so they are sent again one by
    one); a connection that fails fails the reads it carried, which ``Database`` sends once
    more on another. A read whose caller went away before its group was sent is not sent.
    """

    __slots__ = ("_pool", "_senders", "_sending", "_waiting")

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool
        self._waiting: list[_Job] = []
        # The sending tasks (held, so they are not collected), and how many have not yet seen
        # the queue empty: a task's done callback runs later, after a read may have come.
        self._senders: set[asyncio.Task[None]] = set()
        self._sending = 0

    async def fetch_all(self, sql: str, values: Any) -> list[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Any]] = loop.create_future()
        self._waiting.append((sql, values, future))
        if not self._sending or (
            len(self._waiting) >= KEYED_READ_MORE_AT and self._sending < KEYED_READ_CONNECTIONS
        ):
            self._sending += 1
            task = loop.create_task(self._send())
            self._senders.add(task)
            task.add_done_callback(self._senders.discard)
        return await future

    async def _send(self) -> None:
        try:
            await self._send_waiting()
        finally:
            self._sending -= 1  # at once, when the queue is empty (or on a failure)

    async def _send_waiting(self) -> None:
        from psycopg_pool import PoolTimeout

        while self._waiting:
            # A read whose caller went away (cancelled) before it was sent is not.
            group = [job for job in self._waiting[:KEYED_READ_GROUP_MAX] if not job[2].done()]
            del self._waiting[:KEYED_READ_GROUP_MAX]
            if not group:
                continue
            try:
                # A connection a group at a time: one the server ended goes back to the pool,
                # which drops it, and ``Database``'s check of the pool reaches every other.
                async with self._pool.connection(timeout=KEYED_READ_WAIT_SECONDS) as connection:
                    await _run_group(connection, group)
            except BaseException as exc:
                # The group's reads get the error (``Database`` sends them again); with no
                # connection to be had, every read waiting gets it, rather than each waiting
                # its turn to time out.
                failed = group
                if not isinstance(exc, Exception) or isinstance(exc, PoolTimeout):
                    failed, self._waiting = group + self._waiting, []
                for _, _, future in failed:
                    if future.done():
                        continue
                    if isinstance(exc, Exception):
                        future.set_exception(exc)
                    else:
                        future.cancel()
                if not isinstance(exc, Exception):
                    raise


async def _run_group(connection: Any, group: list[_Job]) -> None:
    """``group``'s reads on ``connection``, each read's rows or error to its future; raises if
    the connection fails."""
    from psycopg import Error as PgError
    from psycopg import OperationalError as PgOperationalError

    if len(group) > 1:
        try:
            async with connection.pipeline():
                cursors = [await connection.execute(sql, values, prepare=True) for sql, values, _ in group]
        except PgOperationalError:
            raise
        except PgError:
            pass  # one statement failed, and the pipeline skipped those after it: one by one below
        else:
            for cursor, (_, _, future) in zip(cursors, group, strict=True):
                _answer(future, await cursor.fetchall())
            return
    for sql, values, future in group:
        if future.done():
            continue
        try:
            cursor = await connection.execute(sql, values, prepare=True)
        except PgOperationalError:
            raise
        except PgError as exc:  # this statement's own failure, answered to its read
            future.set_exception(exc)
        else:
            _answer(future, await cursor.fetchall())


def _answer(future: asyncio.Future[list[Any]], rows: list[Any]) -> None:
    if not future.done():  # its caller went away meanwhile
        future.set_result(rows)


class DriverStatement:
    """A Core statement run as its SQL on the driver's own connection, compiled once per
    dialect (building and compiling a statement costs more than running it)."""

    __slots__ = ("_compiled", "statement")

    def __init__(self, statement: ClauseElement) -> None:
        self.statement = statement
        self._compiled: dict[str, _Compiled] = {}

    def compiled(self, dialect: Dialect) -> _Compiled:
        """The statement's SQL for ``dialect``, how its parameters are sent, and the selected
        columns' result processors."""
        done = self._compiled.get(dialect.name)
        if done is None:
            compiled = self.statement.compile(dialect=dialect)
            processors: list[Callable[[Any], Any] | None] = [
                column.type.dialect_impl(dialect).result_processor(dialect, None)
                for column in getattr(self.statement, "selected_columns", ())
            ]
            order = getattr(compiled, "positiontup", None)
            positions = list(order) if order else None
            # The values the statement holds itself (a literal: ``value + 1``, ``coalesce(…, 0)``).
            binds = getattr(compiled, "binds", {})
            held = {name: bind.value for name, bind in binds.items() if not bind.required}
            # How each parameter's type stores a value (SQLite keeps a time as text, say); only
            # a KeyedRead applies them, a loop commit's values being in their stored form.
            stored = {
                name: processor
                for name, bind in binds.items()
                if bind.required
                and (processor := bind.type.dialect_impl(dialect).bind_processor(dialect)) is not None
            }
            done = _Compiled(str(compiled), positions, processors, held, stored)
            self._compiled[dialect.name] = done
        return done

    def values(self, dialect: Dialect, params: dict[str, Any]) -> tuple[str, Any]:
        """The SQL and the values to send for ``params``."""
        return _sent(self.compiled(dialect), params)


class KeyedRead(DriverStatement):
    """A SELECT by key, run on every request (metadata's asset GET, and the first pages of an
    organization's assets), answered as rows (attributes named after their columns): one
    round trip, on the event loop, on either database.

    It runs as its SQL, compiled once per dialect, on the driver's own connection; each
    parameter goes through its type's bind processor and each value read through its column
    type's result processor, as SQLAlchemy would. Around one
    such statement, SQLAlchemy's execution, its transaction events, the BEGIN and ROLLBACK and
    the worker-thread trip cost more CPU than the statement (SQLite: several times as much;
    PostgreSQL: three round trips where one will do; bench/results/journal.md, "Figures moved
    out of code comments"). One statement needs
    no transaction: both connections are in autocommit mode, so it reads one snapshot of its
    own and holds none after.

    - **SQLite**: ``Database``'s loop connection, a sqlite3 connection with a busy timeout of
      0, used only on the event loop (cheap on pages the OS has cached, a page of 50 rows
      too). Worker threads stepping SQLite statements side by side hand the GIL back and forth
      at every row: at 16 concurrent pages each cost several times its CPU alone
      (bench/results/journal.md, "What changed in the morning, each priced A/B in one
      session"). A read that meets a lock anyway (WAL
      recovery, an exclusive lock) fails at once and runs the same SQL again in a worker
      thread, where it waits as every other statement does.
    - **PostgreSQL**: a psycopg ``AsyncConnection`` from ``Database``'s small pool of them,
      the statement prepared on each connection the first time it runs there, so a read is
      one Bind/Execute/Sync exchange; reads that arrive while others are out go together in
      one pipeline (``_PgReads``). A read that fails because the connection died (the
      server restarted) runs once more on another; then it is 503, as through the session.
    """

    __slots__ = ("row",)
    statement: Select[Any]

    def __init__(self, statement: Select[Any]) -> None:
        super().__init__(statement)
        self.row = namedtuple("Row", statement.selected_columns.keys())  # type: ignore[misc]

    async def all(self, database: Database, params: dict[str, Any]) -> list[Any]:
        """Every row the statement answers (a page: its LIMIT bounds them)."""
        dialect = database.engine.dialect
        compiled = self.compiled(dialect)
        if compiled.stored:  # the parameters as their columns store them, as SQLAlchemy sends them
            params = {name: (p(v) if (p := compiled.stored.get(name)) else v) for name, v in params.items()}
        sql, values = _sent(compiled, params)
        processors, row = compiled.processors, self.row
        return [
            row(*[p(v) if p else v for p, v in zip(processors, raw, strict=True)])
            for raw in await database.fetch_all(sql, values)
        ]

    async def first(self, database: Database, params: dict[str, Any]) -> Any | None:
        rows = await self.all(database, params)
        return rows[0] if rows else None


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    # The parameters' names in order for a positional paramstyle (SQLite's ?); None: by name.
    positions: list[str] | None
    processors: list[Callable[[Any], Any] | None]
    held: dict[str, Any]
    # The bind processors of the parameters whose type has one.
    stored: dict[str, Callable[[Any], Any]]


def _sent(compiled: _Compiled, params: dict[str, Any]) -> tuple[str, Any]:
    """``compiled``'s SQL and the values to send for ``params``."""
    if compiled.held:
        params = {**compiled.held, **params}
    if compiled.positions is not None:
        return compiled.sql, [params[name] for name in compiled.positions]
    return compiled.sql, params


def _sqlite_all(engine: Engine, sql: str, values: Any) -> list[Any]:
    """In a worker thread: ``sql`` on a pooled connection, which waits out a lock."""
    connection = engine.raw_connection()
    try:
        return list(connection.cursor().execute(sql, values).fetchall())
    finally:
        connection.close()


def _loop_pool(engine: Engine, name: str, size: int) -> AsyncConnectionPool:
    """Event-loop PostgreSQL connections to the engine's database, in autocommit mode, for
    KeyedRead (``coffer-keyed-read``) or PgTransaction (``coffer-loop-write``)."""
    from psycopg.conninfo import make_conninfo
    from psycopg_pool import AsyncConnectionPool

    _, options = engine.dialect.create_connect_args(engine.url)
    # The connection options; SQLAlchemy's own adapters ("context") are not needed by a
    # KeyedRead, whose columns' result processors do SQLAlchemy's part.
    options = {k: v for k, v in options.items() if isinstance(v, str | int) and k != "context"}
    return AsyncConnectionPool(
        # Named, so an operator (and a test) can tell them in pg_stat_activity.
        make_conninfo(**options, application_name=name),
        min_size=1,
        max_size=size,
        kwargs={"autocommit": True},
        open=False,
        name=name,
    )


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
