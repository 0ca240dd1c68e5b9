"""PostgreSQL on the event loop: write transactions sent in pipelines (PgTransaction) and
KeyedReads grouped into pipelines (PgReads), each over a small pool of psycopg connections."""

from __future__ import annotations

import asyncio
from collections import namedtuple
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Dialect, Engine

from coffer_kit.db.engine import READ_CONNECTIONS, WRITE_CONNECTIONS, without_nul

if TYPE_CHECKING:  # psycopg is imported where PostgreSQL is used: the embedded default never loads it
    from psycopg_pool import AsyncConnectionPool

    from coffer_kit.db.statements import DriverStatement

# PostgreSQL connections the event loop keeps for KeyedRead by default (each read a round
# trip of tens of microseconds: a few serve any rate one process reaches), beside the engine's
# pool (COFFER_DATABASE_READ_CONNECTIONS), and how long a read waits for one before it answers
# 503 (the database is down or unreachable).
KEYED_READ_CONNECTIONS = READ_CONNECTIONS
KEYED_READ_WAIT_SECONDS = 5.0
# At most this many KeyedReads sent in one pipeline, and how many must wait behind the groups
# out before another connection takes some (see PgReads).
KEYED_READ_GROUP_MAX = 32
KEYED_READ_MORE_AT = 8
# PostgreSQL connections the event loop keeps for write transactions (``Database.write``'s
# ``on_loop``) by default, apart from the reads': a write that waits for a row lock never
# holds a read back. Writes of one organization take turns on its usage row anyway
# (COFFER_DATABASE_WRITE_CONNECTIONS).
LOOP_WRITE_CONNECTIONS = WRITE_CONNECTIONS


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

    __slots__ = ("_connection", "_dialect", "_prepare", "commit_sent", "open")

    def __init__(self, connection: Any, dialect: Dialect, *, prepare: bool = True) -> None:
        self._connection = connection
        self._dialect = dialect
        # False behind a transaction pooler: see coffer_kit.db.engine.DatabaseBudget.
        self._prepare = prepare
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
                cursors.append(await connection.execute(sql, without_nul(values), prepare=self._prepare))
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
        cursor = await self._connection.execute(sql, without_nul(values), prepare=self._prepare)
        return Sent(cursor.rowcount, await cursor.fetchall() if cursor.description else [])

    async def end(self) -> None:
        """Roll back what is not committed (a failed statement leaves the transaction open)."""
        from psycopg.pq import TransactionStatus

        if self._connection.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
            await self._connection.execute("ROLLBACK", prepare=False)
        self.open = False


# A KeyedRead waiting to be sent on PostgreSQL: its SQL, its values, and its answer.
_Job = tuple[str, Any, "asyncio.Future[list[Any]]"]


class PgReads:
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

    __slots__ = ("_connections", "_pool", "_prepare", "_senders", "_sending", "_waiting")

    def __init__(self, pool: AsyncConnectionPool, *, prepare: bool = True) -> None:
        self._pool = pool
        self._prepare = prepare
        self._connections = pool.max_size
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
            len(self._waiting) >= KEYED_READ_MORE_AT and self._sending < self._connections
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
                    await _run_group(connection, group, self._prepare)
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


async def _run_group(connection: Any, group: list[_Job], prepare: bool) -> None:
    """``group``'s reads on ``connection``, each read's rows or error to its future; raises if
    the connection fails."""
    from psycopg import Error as PgError
    from psycopg import OperationalError as PgOperationalError

    if len(group) > 1:
        try:
            async with connection.pipeline():
                cursors = [await connection.execute(sql, values, prepare=prepare) for sql, values, _ in group]
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
            cursor = await connection.execute(sql, values, prepare=prepare)
        except PgOperationalError:
            raise
        except PgError as exc:  # this statement's own failure, answered to its read
            future.set_exception(exc)
        else:
            _answer(future, await cursor.fetchall())


def _answer(future: asyncio.Future[list[Any]], rows: list[Any]) -> None:
    if not future.done():  # its caller went away meanwhile
        future.set_result(rows)


def loop_pool(engine: Engine, name: str, size: int, *, prepare: bool = True) -> AsyncConnectionPool:
    """Event-loop PostgreSQL connections to the engine's database, in autocommit mode, for
    KeyedRead (``coffer-keyed-read``) or PgTransaction (``coffer-loop-write``); with
    ``prepare=False`` (behind a transaction pooler) psycopg never prepares a statement."""
    from psycopg.conninfo import make_conninfo
    from psycopg_pool import AsyncConnectionPool

    _, options = engine.dialect.create_connect_args(engine.url)
    # The connection options; SQLAlchemy's own adapters ("context") are not needed by a
    # KeyedRead, whose columns' result processors do SQLAlchemy's part.
    options = {k: v for k, v in options.items() if isinstance(v, str | int) and k != "context"}
    kwargs: dict[str, Any] = {"autocommit": True}
    if not prepare:
        kwargs["prepare_threshold"] = None
    return AsyncConnectionPool(
        # Named, so an operator (and a test) can tell them in pg_stat_activity.
        make_conninfo(**options, application_name=name),
        min_size=1,
        max_size=size,
        kwargs=kwargs,
        open=False,
        name=name,
    )
