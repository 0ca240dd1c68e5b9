"""Core statements run as their SQL on the driver's own connection (DriverStatement), and the
read by key on the event loop (KeyedRead)."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Select
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement

if TYPE_CHECKING:
    from coffer_kit.db.database import Database


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
      one pipeline (``PgReads``). A read that fails because the connection died (the
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
