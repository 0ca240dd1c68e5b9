"""KeyedRead (coffer_kit.db): a row by key on the event loop, one round trip, on both
databases, answering what SQLAlchemy answers; a locked SQLite read waits in a thread, a
PostgreSQL connection that died is replaced, reads sent together in one pipeline each get
their own answer."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from coffer_kit.contract.errors import CofferError
from coffer_kit.db import Database, KeyedRead
from coffer_testkit.pytest_plugin import new_database_url


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


_things = sa.Table(
    "things",
    sa.MetaData(),
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("made_at", sa.DateTime),
    sa.Column("size", sa.BigInteger),
    sa.Column("note", sa.String, nullable=True),
)
THING = KeyedRead(sa.select(_things).where(_things.c.id == sa.bindparam("thing_id")))
# A statement that fails on PostgreSQL for one value (a zero divisor) and answers for the others.
SHARE = KeyedRead(
    sa.select((_things.c.size // sa.bindparam("parts", type_=sa.BigInteger)).label("share")).where(
        _things.c.id == sa.bindparam("thing_id")
    )
)


def _things_database(url: str) -> Database:
    database = Database.open(url)
    _things.metadata.create_all(database.engine)
    with database.engine.begin() as connection:
        connection.execute(
            _things.insert(),
            [
                {"id": "a", "made_at": datetime(2026, 11, 24, 4, 5, 6, 789000), "size": 2**40, "note": "ünï"},
                {"id": "b", "made_at": datetime(2026, 1, 1), "size": 0, "note": None},
            ],
        )
    return database


@pytest.fixture(params=["sqlite", "postgresql"])
async def things(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    database = _things_database(new_database_url(request, request.param, tmp_path, "things"))
    yield database
    await database.aclose()


@pytest.mark.anyio
async def test_a_keyed_read_answers_what_sqlalchemy_answers_on_the_loop(things: Database) -> None:
    for thing_id in ("a", "b", "nothing", "nul\x00"):
        with things.engine.connect() as connection:
            expected = connection.execute(THING.statement, {"thing_id": thing_id}).first()
        got = await THING.first(things, {"thing_id": thing_id})
        assert (got is None) == (expected is None)
        if expected is not None:
            assert tuple(got) == tuple(expected) and got._fields == tuple(expected._fields)
            assert isinstance(got.made_at, datetime)
    # No worker thread and no SQLAlchemy connection was used.
    assert things.engine.pool.checkedout() == 0  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_a_keyed_read_sees_every_commit_and_holds_no_snapshot(things: Database) -> None:
    assert (await THING.first(things, {"thing_id": "b"})).size == 0
    with things.engine.begin() as connection:
        connection.execute(_things.update().where(_things.c.id == "b").values(size=7))
        connection.execute(_things.delete().where(_things.c.id == "a"))
    assert (await THING.first(things, {"thing_id": "b"})).size == 7
    assert await THING.first(things, {"thing_id": "a"}) is None
    with things.engine.connect() as connection:
        if things.engine.dialect.name == "sqlite":
            # No read left open on the loop's connection: a checkpoint can truncate the whole WAL.
            busy, _, _ = connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").one()
            assert busy == 0
        else:
            # The read's connections sit idle, in no transaction (autocommit). A connection of
            # the pool still starting has no state yet (NULL), and no transaction either.
            states = connection.exec_driver_sql(
                "SELECT state FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND application_name = 'coffer-keyed-read'"
                " AND state IS NOT NULL"
            ).scalars()
            assert set(states) == {"idle"}


@pytest.mark.anyio
async def test_a_sqlite_keyed_read_that_meets_a_lock_waits_in_a_thread(tmp_path: Path) -> None:
    path = tmp_path / "things.db"
    database = _things_database(f"sqlite:///{path}")
    database.engine.dispose()  # no connection open: another process can take the file whole
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("PRAGMA locking_mode=EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")  # no other connection can read now, WAL or not
        task = asyncio.create_task(THING.first(database, {"thing_id": "a"}))
        # Refused at once on the loop, the read waits in a worker thread on a pooled connection.
        while database.engine.pool.checkedout() == 0:  # type: ignore[attr-defined]
            assert not task.done(), task
            await asyncio.sleep(0.01)
        holder.execute("ROLLBACK")
        holder.close()
        row = await task
        assert row.id == "a" and row.size == 2**40 and isinstance(row.made_at, datetime)
        # The lock gone, the next read is the loop's again: no pooled connection taken.
        assert (await THING.first(database, {"thing_id": "a"})).id == "a"
        assert database.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    finally:
        holder.close()
        await database.aclose()


def _end_keyed_read_connections(database: Database) -> int:
    """The server ends every connection of the database's KeyedReads, as a restart would, and
    each backend has exited when this returns (pg_terminate_backend waits up to 5 s): how many."""
    with database.engine.connect() as connection:
        return int(
            connection.exec_driver_sql(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = 'coffer-keyed-read'"
            ).scalar_one()
        )


@pytest.mark.anyio
async def test_a_postgresql_keyed_read_outlives_its_connections(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    database = _things_database(new_database_url(request, "postgresql", tmp_path, "things"))
    try:
        reads = [THING.first(database, {"thing_id": "a"}) for _ in range(8)]
        assert {row.id for row in await asyncio.gather(*reads)} == {"a"}
        assert _end_keyed_read_connections(database)
        assert (await THING.first(database, {"thing_id": "a"})).id == "a"
        assert (await THING.first(database, {"thing_id": "b"})).size == 0
        # Again, with many reads at once: every group sent on a dead connection is sent again.
        assert _end_keyed_read_connections(database)
        reads = [THING.first(database, {"thing_id": "ab"[i % 2]}) for i in range(40)]
        assert [row.id for row in await asyncio.gather(*reads)] == ["ab"[i % 2] for i in range(40)]
    finally:
        await database.aclose()


@pytest.mark.anyio
async def test_reads_sent_together_each_get_their_own_answer(things: Database) -> None:
    """Many reads at once (on PostgreSQL, sent in pipelines) are each answered with their own
    rows, in any mix of keys found and not."""
    keys = [("a", "b", "nothing")[i % 3] for i in range(150)]
    rows = await asyncio.gather(*(THING.first(things, {"thing_id": key}) for key in keys))
    assert [row.id if row else None for row in rows] == [key if key != "nothing" else None for key in keys]

    # Readers that each read again the moment they are answered: every read is sent, whenever
    # it comes (none waits for a read after it to be sent with).
    async def reader(key: str) -> list[str]:
        return [(await THING.first(things, {"thing_id": key})).id for _ in range(40)]

    answers = await asyncio.wait_for(asyncio.gather(*(reader("ab"[i % 2]) for i in range(6))), 30)
    assert answers == [["ab"[i % 2]] * 40 for i in range(6)]


@pytest.mark.anyio
async def test_a_postgresql_read_that_fails_fails_alone(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A read whose statement fails gets its own error, and the reads sent in the same
    pipeline get their rows."""
    database = _things_database(new_database_url(request, "postgresql", tmp_path, "things"))
    try:
        parts = [i % 7 for i in range(70)]  # every seventh divides by zero
        shares = await asyncio.gather(
            *(SHARE.first(database, {"thing_id": "a", "parts": n}) for n in parts), return_exceptions=True
        )
        for n, share in zip(parts, shares, strict=True):
            if n == 0:
                assert isinstance(share, Exception)
                assert "division by zero" in str(share)
            else:
                assert not isinstance(share, BaseException)
                assert share.share == 2**40 // n
        # The connections are whole after the failures.
        assert (await THING.first(database, {"thing_id": "b"})).size == 0
    finally:
        await database.aclose()


@pytest.mark.anyio
@pytest.mark.usefixtures("postgres_server_url")  # PostgreSQL's driver: not in make test-fast
async def test_a_keyed_read_of_a_database_that_is_gone_is_503(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = sa.make_url(new_database_url(request, "postgresql", tmp_path, "things"))
    database = Database.open(url.set(port=1).render_as_string(hide_password=False))  # nothing listens
    try:
        with pytest.raises(CofferError) as refused:
            await THING.first(database, {"thing_id": "a"})
        assert refused.value.status == 503
    finally:
        await database.aclose()
