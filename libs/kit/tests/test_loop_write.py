"""Database.write's ``on_loop`` (coffer_kit.db.PgTransaction): on PostgreSQL a hot write's
common case runs on the event loop and commits; anything it does not finish (it answers None,
a statement fails, the connection dies before the COMMIT) leaves nothing, and the write's
worker-thread form runs and answers instead; a refusal it raises is the caller's answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session

from coffer_kit.contract.errors import CofferError, conflict
from coffer_kit.db import Database, DriverStatement, PgTransaction
from coffer_testkit.pytest_plugin import new_database_url


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


_counters = sa.Table(
    "counters",
    sa.MetaData(),
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("value", sa.BigInteger, nullable=False),
)
_ADD = sa.update(_counters).where(_counters.c.id == sa.bindparam("p_id")).values(value=_counters.c.value + 1)
_READ = sa.select(_counters.c.value).where(_counters.c.id == sa.bindparam("p_id"))
ADD, READ = DriverStatement(_ADD), DriverStatement(_READ)
# One statement that adds, then fails (a zero divisor): all of it or nothing.
_added = _ADD.returning(_counters.c.value).cte("added")
ADD_THEN_FAIL = DriverStatement(
    sa.select(sa.select(_added.c.value).scalar_subquery() // sa.bindparam("p_by", type_=sa.BigInteger))
)
# Fails on the server for a zero divisor.
DIVIDE = DriverStatement(
    sa.update(_counters)
    .where(_counters.c.id == sa.bindparam("p_id"))
    .values(value=_counters.c.value // sa.bindparam("p_by", type_=sa.BigInteger))
)


@pytest.fixture
async def counters(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    database = Database.open(new_database_url(request, "postgresql", tmp_path, "counters"))
    _counters.metadata.create_all(database.engine)
    with database.engine.begin() as connection:
        connection.execute(_counters.insert(), [{"id": "a", "value": 0}])
    yield database
    await database.aclose()


def _value(database: Database) -> int:
    with database.engine.connect() as connection:
        return int(connection.execute(_READ, {"p_id": "a"}).scalar_one())


def _in_thread(session: Session) -> str:
    session.connection().execute(_ADD, {"p_id": "a"})
    return "thread"


def _loop_connection_states(database: Database) -> set[str]:
    with database.engine.connect() as connection:
        return set(
            connection.exec_driver_sql(
                "SELECT state FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name = 'coffer-loop-write' AND state IS NOT NULL"
            ).scalars()
        )


@pytest.mark.anyio
async def test_what_the_loop_answers_is_committed_and_the_thread_never_runs(counters: Database) -> None:
    async def on_loop(transaction: PgTransaction) -> str:
        (added,) = await transaction.send((ADD, {"p_id": "a"}))
        (read,) = await transaction.send((READ, {"p_id": "a"}))
        assert added.rowcount == 1 and read.rows == [(1,)]  # its own change, before the COMMIT
        return "loop"

    def never(_session: Session) -> str:
        raise AssertionError("the worker-thread form ran")

    assert await counters.write(never, on_loop=on_loop) == "loop"
    assert _value(counters) == 1
    # Many at once: each its own transaction, every one committed, the pool's connections idle after.
    answers = await asyncio.gather(*(counters.write(never, on_loop=_add_and_commit) for _ in range(20)))
    assert answers == ["loop"] * 20 and _value(counters) == 21
    assert _loop_connection_states(counters) == {"idle"}
    assert counters.engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def _add_and_commit(transaction: PgTransaction) -> str:
    (added,) = await transaction.send((ADD, {"p_id": "a"}), commit=True)
    assert added.rowcount == 1
    return "loop"


@pytest.mark.anyio
async def test_a_loop_write_that_answers_none_leaves_nothing_and_the_thread_answers(
    counters: Database,
) -> None:
    async def declines(transaction: PgTransaction) -> str | None:
        await transaction.send((ADD, {"p_id": "a"}), (ADD, {"p_id": "a"}))
        return None

    assert await counters.write(_in_thread, on_loop=declines) == "thread"
    assert _value(counters) == 1  # the thread's one, none of the loop's two
    assert _loop_connection_states(counters) == {"idle"}


@pytest.mark.anyio
async def test_a_failed_statement_rolls_the_loop_write_back_and_the_thread_answers(
    counters: Database,
) -> None:
    async def fails(transaction: PgTransaction) -> str:
        await transaction.send((ADD, {"p_id": "a"}), (DIVIDE, {"p_id": "a", "p_by": 0}), (ADD, {"p_id": "a"}))
        raise AssertionError("a failed statement raises")

    assert await counters.write(_in_thread, on_loop=fails) == "thread"
    assert _value(counters) == 1
    assert _loop_connection_states(counters) == {"idle"}
    # The connection serves the next write as well.
    assert await counters.write(_in_thread, on_loop=_add_and_commit) == "loop"
    assert _value(counters) == 2


@pytest.mark.anyio
async def test_a_refusal_raised_on_the_loop_is_the_answer_and_nothing_stays(counters: Database) -> None:
    async def refuses(transaction: PgTransaction) -> str:
        await transaction.send((ADD, {"p_id": "a"}))
        raise conflict("No.")

    def never(_session: Session) -> str:
        raise AssertionError("the worker-thread form ran")

    with pytest.raises(CofferError) as refused:
        await counters.write(never, on_loop=refuses)
    assert refused.value.status == 409
    assert _value(counters) == 0
    assert _loop_connection_states(counters) == {"idle"}


@pytest.mark.anyio
async def test_a_loop_write_whose_connection_died_before_its_commit_runs_in_the_thread(
    counters: Database,
) -> None:
    assert await counters.write(_in_thread, on_loop=_add_and_commit) == "loop"
    with counters.engine.connect() as connection:  # as a restart of the server would
        ended = connection.exec_driver_sql(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = 'coffer-loop-write'"
        ).scalar_one()
    assert ended >= 1
    answers = [await counters.write(_in_thread, on_loop=_add_and_commit) for _ in range(3)]
    # The dead connection's write ran in the thread; the pool replaced it for the next ones.
    assert answers[0] == "thread" and answers[-1] == "loop"
    assert _value(counters) == 4


@pytest.mark.anyio
async def test_on_sqlite_the_loop_form_is_never_used(tmp_path: Path) -> None:
    database = Database.open(f"sqlite:///{tmp_path / 'counters.db'}")
    _counters.metadata.create_all(database.engine)
    with database.engine.begin() as connection:
        connection.execute(_counters.insert(), [{"id": "a", "value": 0}])

    async def never(_transaction: PgTransaction) -> Any:
        raise AssertionError("the loop form ran on SQLite")

    try:
        assert await database.write(_in_thread, on_loop=never) == "thread"
        assert _value(database) == 1
    finally:
        await database.aclose()


@pytest.mark.anyio
async def test_a_statement_alone_is_its_own_transaction(counters: Database) -> None:
    async def alone(transaction: PgTransaction) -> str:
        added = await transaction.alone(ADD, {"p_id": "a"})
        assert added.rowcount == 1 and not transaction.open
        return "loop"

    def never(_session: Session) -> str:
        raise AssertionError("the worker-thread form ran")

    assert await counters.write(never, on_loop=alone) == "loop"
    assert _value(counters) == 1

    # One that fails writes nothing (its division fails after its update), and the thread answers.
    async def fails(transaction: PgTransaction) -> str:
        await transaction.alone(ADD_THEN_FAIL, {"p_id": "a", "p_by": 0})
        raise AssertionError("a failed statement raises")

    assert await counters.write(_in_thread, on_loop=fails) == "thread"
    assert _value(counters) == 2
    assert _loop_connection_states(counters) == {"idle"}
