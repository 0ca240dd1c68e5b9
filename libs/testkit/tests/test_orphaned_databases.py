"""A killed test session's PostgreSQL databases are dropped by the next session on the machine,
and nobody else's are (the real server: coffer_testkit.pytest_plugin.drop_orphaned_databases)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, text

from coffer_testkit.pytest_plugin import database_name, drop_orphaned_databases


@pytest.fixture
def admin(postgres_server_url: str) -> Iterator[Engine]:
    engine = create_engine(postgres_server_url, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    return int(gone.stdout)


def _databases(admin: Engine) -> set[str]:
    with admin.connect() as conn:
        return set(conn.scalars(text("SELECT datname FROM pg_database")))


def test_a_killed_sessions_databases_go_and_no_one_elses(admin: Engine) -> None:
    ours = database_name("orphan")
    killed = ours.replace(f"_{os.getpid()}_", f"_{_dead_pid()}_")
    machine = ours.split("_")[-3]
    elsewhere = killed.replace(f"_{machine}_", "_0badc0de_")
    unnamed = "coffer_test_orphan_unnamed"
    names = [ours, killed, elsewhere, unnamed]
    with admin.connect() as conn:
        for name in names:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        dropped = drop_orphaned_databases(admin)
        left = _databases(admin)
        assert killed in dropped and killed not in left
        assert {ours, elsewhere, unnamed} <= left and not {ours, elsewhere, unnamed} & set(dropped)
    finally:
        with admin.connect() as conn:
            for name in names:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def test_the_databases_a_session_makes_name_it(fresh_database: object) -> None:
    url = fresh_database("maker")  # type: ignore[operator]
    assert f"_{os.getpid()}_" in url.rsplit("/", 1)[1]
