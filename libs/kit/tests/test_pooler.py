"""Behind PgBouncer in transaction mode (COFFER_DATABASE_POOLER=transaction, docs/operations.md):
a server connection is a client's for one transaction only, so every path of Database (the
worker threads' transactions, the event loop's keyed reads and hot writes) must work with the
same statements sent many times over many server connections: nothing prepared, no session
state. A real PgBouncer (Debian's) in front of the test PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session

from coffer_kit.db import Database, DatabaseBudget, DriverStatement, PgTransaction
from coffer_testkit.pytest_plugin import new_database_url


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


_counters = sa.Table(
    "pooled_counters",
    sa.MetaData(),
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("value", sa.BigInteger, nullable=False),
)
_ADD = sa.update(_counters).where(_counters.c.id == sa.bindparam("p_id")).values(value=_counters.c.value + 1)
_READ = sa.select(_counters.c.value).where(_counters.c.id == sa.bindparam("p_id"))
ADD = DriverStatement(_ADD)
# Writes go through more client connections than the pooler has server connections for one
# database (coffer_testkit.pgbouncer: 8): each transaction meets whichever is free.
BUDGET = DatabaseBudget(pool=6, reads=4, writes=6, pooler="transaction")


@pytest.fixture
async def pooled(request: pytest.FixtureRequest, tmp_path: Path, pgbouncer: Any) -> AsyncIterator[Database]:
    direct = new_database_url(request, "postgresql", tmp_path, "pooled")
    engine = sa.create_engine(direct)
    _counters.metadata.create_all(engine)
    with engine.begin() as connection:
        connection.execute(_counters.insert(), [{"id": "a", "value": 0}])
    engine.dispose()
    database = Database.open(pgbouncer.url_for(direct), budget=BUDGET)
    yield database
    await database.aclose()


def _in_thread(session: Session) -> str:
    session.connection().execute(_ADD, {"p_id": "a"})
    return "thread"


async def _on_loop(transaction: PgTransaction) -> str:
    await transaction.send((ADD, {"p_id": "a"}), commit=True)
    return "loop"


@pytest.mark.anyio
async def test_every_path_works_through_the_pooler(pooled: Database) -> None:
    rounds = 40
    read_sql = "SELECT value FROM pooled_counters WHERE id = %(p_id)s"

    async def one() -> tuple[str, str, list[Any]]:
        on_loop = await pooled.write(_in_thread, _on_loop)
        in_thread = await pooled.write(_in_thread)
        rows = await pooled.fetch_all(read_sql, {"p_id": "a"})
        return on_loop, in_thread, rows

    # The same statements, far past psycopg's default prepare threshold (5), at once.
    results = await asyncio.gather(*(one() for _ in range(rounds)))
    assert {r[0] for r in results} == {"loop"}  # the event loop's transaction, not the fallback
    assert {r[1] for r in results} == {"thread"}
    assert all(len(r[2]) == 1 for r in results)
    with pooled.engine.connect() as connection:
        assert connection.execute(_READ, {"p_id": "a"}).scalar_one() == 2 * rounds
