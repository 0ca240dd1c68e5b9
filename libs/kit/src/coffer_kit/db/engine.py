"""The engine chosen by URL (a SQLite file or PostgreSQL), how a failed database maps to 503,
and the readiness check."""

from __future__ import annotations

import functools
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import event, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.pool import QueuePool
from sqlmodel import create_engine
from starlette.concurrency import run_in_threadpool

from coffer_kit.contract.errors import unavailable
from coffer_kit.tracing import instrument_engine

# Execution option marking a transaction that will write (see the SQLite begin hook below).
WRITE_OPTION = "coffer_write"

T = TypeVar("T")

# As many pooled connections as the thread pool has threads (anyio's default is 40): a
# connection opened past the pool's size is closed again after one use, and opening one costs
# more than the query it serves.
POOL_SIZE = 40


# The event loop's PostgreSQL connections by default (see coffer_kit.db.postgres).
READ_CONNECTIONS = 4
WRITE_CONNECTIONS = 8


@dataclass(frozen=True, slots=True)
class DatabaseBudget:
    """The connections one process may hold to its database: ``pool`` for transactions in
    worker threads (SQLAlchemy's pool, no overflow), and on PostgreSQL ``reads`` and
    ``writes`` for the event loop's keyed reads and hot writes; at most their sum at once.

    ``pooler="transaction"``: the URL is a pooler in transaction mode (PgBouncer), which
    gives a server connection to a client for one transaction: nothing is prepared (psycopg's
    ``prepare_threshold=None``; a statement prepared on one server connection is unknown on
    the next) and no setting is sent for the session (``options``, which PgBouncer refuses).
    Every other use of the database is already transaction-scoped: locks are
    ``pg_advisory_xact_lock``, and nothing LISTENs. Migrations take a session lock and go
    straight to PostgreSQL (docs/operations.md)."""

    pool: int = POOL_SIZE
    reads: int = READ_CONNECTIONS
    writes: int = WRITE_CONNECTIONS
    pooler: str = "none"

    @property
    def total(self) -> int:
        return self.pool + self.reads + self.writes

    @property
    def prepare(self) -> bool:
        return self.pooler != "transaction"


# How long a SQLite statement waits for a lock before it fails (milliseconds).
BUSY_TIMEOUT_MS = 30_000


def make_engine(
    url: str,
    *,
    pool_size: int = POOL_SIZE,
    busy_timeout_ms: int = BUSY_TIMEOUT_MS,
    durable: bool = True,
    pooler: str = "none",
) -> Engine:
    """An engine for ``url``; SQLite gets WAL, foreign keys and a busy timeout.

    ``durable=False``: a commit returns before it is on disk (SQLite ``synchronous=NORMAL``,
    PostgreSQL ``synchronous_commit=off``). A crash of the machine or the server may lose the
    last commits, never half of one; only for writers that redo whatever such a loss undoes
    (the webhook dispatcher). On SQLite it then holds the write lock for no flush. Behind a
    transaction pooler (``pooler="transaction"``) a session setting cannot be had: commits
    stay durable there, and no statement is prepared (see :class:`DatabaseBudget`).
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
    connect_args: dict[str, Any] = {}
    if pooler == "transaction":
        connect_args["prepare_threshold"] = None
    elif not durable:
        connect_args["options"] = "-c synchronous_commit=off"
    engine = create_engine(
        url,
        pool_pre_ping=True,
        pool_size=pool_size,
        max_overflow=0,
        pool_timeout=10,
        connect_args=connect_args,
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
    return statement, without_nul(parameters)


def without_nul(parameters: Any) -> Any:
    """``parameters`` (a dict or a sequence, or a statement's many rows of them: an insert of
    several rows at once) with any NUL in a string value as U+FFFD; as they are when none has
    one (no copy)."""
    if not _has_nul(parameters):
        return parameters
    if isinstance(parameters, dict):
        return {k: without_nul(v) for k, v in parameters.items()}
    if isinstance(parameters, (list, tuple)):
        return type(parameters)(without_nul(v) for v in parameters)
    return _no_nul(parameters)


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_nul(v) for v in value)
    return False


def take_turns(connection: Connection, name: str) -> None:
    """Until this transaction ends, other transactions that take turns on ``name`` wait: a
    check then a write ("fewer than 10", "not inside me") stays true for the write. PostgreSQL:
    a transaction-scoped advisory lock (also behind PgBouncer in transaction mode); SQLite:
    nothing, its write transactions hold the one write lock from BEGIN IMMEDIATE already."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": zlib.crc32(name.encode())})


@functools.cache
def writer(engine: Engine) -> Engine:
    """The same engine, marked so that its transactions take the write lock at BEGIN."""
    return engine.execution_options(**{WRITE_OPTION: True})


def database_down(exc: DBAPIError) -> bool:
    """Whether an error means the database could not be reached (503), not a bad statement."""
    return exc.connection_invalidated or isinstance(exc, OperationalError)


async def in_thread(run: Callable[[], T]) -> T:
    """``run()`` in a worker thread; a database that is down answers 503, as through the
    session dependency."""
    try:
        return await run_in_threadpool(run)
    except DBAPIError as exc:
        if database_down(exc):
            raise unavailable("The database is unavailable.") from exc
        raise


def database_check(engine_of: Callable[[], Engine]) -> Callable[[], Awaitable[None]]:
    """A readiness check that runs ``SELECT 1`` on the engine ``engine_of()`` returns."""

    def ping() -> None:
        with engine_of().connect() as conn:
            conn.execute(text("SELECT 1"))

    async def check() -> None:
        await run_in_threadpool(ping)

    return check
