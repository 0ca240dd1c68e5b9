"""``Database.write`` on SQLite: writes that wait together commit together, and each is still
all or nothing on its own."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import event, text
from sqlmodel import Session

from coffer_kit.contract.errors import CofferError
from coffer_kit.db import Database


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _open(tmp_path: Path) -> tuple[Database, list[int]]:
    database = Database.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with database.engine.begin() as conn:
        conn.execute(text("CREATE TABLE items (name TEXT PRIMARY KEY)"))
        conn.execute(text("CREATE TABLE budget (left INTEGER NOT NULL)"))
        conn.execute(text("INSERT INTO budget VALUES (3)"))
    commits: list[int] = []
    event.listen(database.engine, "commit", lambda _conn: commits.append(1))
    return database, commits


def _names(database: Database) -> set[str]:
    with database.engine.connect() as conn:
        return {row[0] for row in conn.execute(text("SELECT name FROM items"))}


@pytest.mark.anyio
async def test_waiting_writes_share_a_commit_and_a_failed_one_leaves_nothing(tmp_path: Path) -> None:
    database, commits = _open(tmp_path)

    def add(name: str, fail: bool = False) -> str:
        def work(session: Session) -> str:
            session.execute(text("INSERT INTO items VALUES (:name)"), {"name": name})
            if fail:
                raise CofferError(409, "conflict", "refused after writing")
            return name

        return work  # type: ignore[return-value]

    try:
        outcomes = await asyncio.gather(
            *(database.write(add(f"item-{n}", fail=n == 5)) for n in range(20)),  # type: ignore[arg-type]
            return_exceptions=True,
        )
        assert [o for o in outcomes if isinstance(o, BaseException)] == [outcomes[5]]
        assert isinstance(outcomes[5], CofferError)
        assert _names(database) == {f"item-{n}" for n in range(20) if n != 5}
        # The first write commits alone; the nineteen that queued behind it, together.
        assert len(commits) < 20
    finally:
        database.close()


@pytest.mark.anyio
async def test_writes_of_one_group_see_each_other(tmp_path: Path) -> None:
    """A conditional update stays exact: the budget of three admits exactly three of ten."""
    database, _ = _open(tmp_path)

    def take(session: Session) -> bool:
        taken = session.execute(text("UPDATE budget SET left = left - 1 WHERE left > 0"))
        return bool(taken.rowcount == 1)  # type: ignore[attr-defined]

    try:
        taken = await asyncio.gather(*(database.write(take) for _ in range(10)))
        assert sum(taken) == 3
        with database.engine.connect() as conn:
            assert conn.execute(text("SELECT left FROM budget")).scalar() == 0
    finally:
        database.close()


@pytest.mark.anyio
async def test_a_database_failure_fails_every_write_of_the_group_with_503(tmp_path: Path) -> None:
    """The failure may have ended the transaction: nothing of the group stays, all get 503."""
    database, _ = _open(tmp_path)

    def add(name: str, broken: bool = False):  # type: ignore[no-untyped-def]
        def work(session: Session) -> None:
            session.execute(text("INSERT INTO items VALUES (:name)"), {"name": name})
            if broken:  # an OperationalError, as a full disk or an I/O error raises
                session.execute(text("SELECT * FROM no_such_table"))

        return work

    try:
        writes = [database.write(add(f"x{n}", broken=n == 2)) for n in range(5)]
        outcomes = await asyncio.gather(*writes, return_exceptions=True)
        assert all(isinstance(o, CofferError) and o.status == 503 for o in outcomes), outcomes
        assert _names(database) == set()
        await database.write(add("after"))
        assert _names(database) == {"after"}
    finally:
        database.close()
