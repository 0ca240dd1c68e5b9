"""A service's database, one file per mechanism:

- ``engine``: the engine chosen by URL (SQLite file or PostgreSQL), 503 for a database that is
  down, the readiness check;
- ``session``: the session dependency (the request owns the transaction) and ``run_read``;
- ``sqlite``: SQLite's group commit;
- ``postgres``: PostgreSQL on the event loop (``PgTransaction``, the pipelined KeyedReads);
- ``statements``: ``DriverStatement`` and ``KeyedRead``, compiled once per dialect;
- ``database``: ``Database``, which holds them together, and its typed state.

The names other code uses are imported here, so ``from coffer_kit.db import X`` stays the one
way to reach them.
"""

from coffer_kit.db.database import Database, DatabaseDep, DatabaseState, database_of
from coffer_kit.db.engine import (
    BUSY_TIMEOUT_MS,
    POOL_SIZE,
    WRITE_OPTION,
    DatabaseBudget,
    database_check,
    make_engine,
    take_turns,
    writer,
)
from coffer_kit.db.postgres import (
    KEYED_READ_CONNECTIONS,
    KEYED_READ_GROUP_MAX,
    KEYED_READ_MORE_AT,
    KEYED_READ_WAIT_SECONDS,
    LOOP_WRITE_CONNECTIONS,
    PgTransaction,
    Sent,
)
from coffer_kit.db.session import SessionDep, get_session, run_read
from coffer_kit.db.sqlite import GROUP_COMMIT_MAX
from coffer_kit.db.statements import DriverStatement, KeyedRead

__all__ = [
    "BUSY_TIMEOUT_MS",
    "GROUP_COMMIT_MAX",
    "KEYED_READ_CONNECTIONS",
    "KEYED_READ_GROUP_MAX",
    "KEYED_READ_MORE_AT",
    "KEYED_READ_WAIT_SECONDS",
    "LOOP_WRITE_CONNECTIONS",
    "POOL_SIZE",
    "WRITE_OPTION",
    "Database",
    "DatabaseBudget",
    "DatabaseDep",
    "DatabaseState",
    "DriverStatement",
    "KeyedRead",
    "PgTransaction",
    "Sent",
    "SessionDep",
    "database_check",
    "database_of",
    "get_session",
    "make_engine",
    "run_read",
    "take_turns",
    "writer",
]
