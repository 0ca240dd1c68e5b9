"""Alembic, run programmatically: each service keeps its revisions inside its package.

A service's ``migrations/env.py`` calls :func:`run_env`; its ``migrate`` command calls
:func:`upgrade`. The same revisions serve SQLite and PostgreSQL.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from alembic import command, context
from alembic.config import Config
from sqlalchemy import MetaData, Table, text

from coffer_kit.db import make_engine


def config(script_location: Path, url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(script_location))
    cfg.attributes["url"] = url
    return cfg


def upgrade(script_location: Path, url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` up to ``revision``."""
    command.upgrade(config(script_location, url), revision)


def metadata_of(tables: list[Table]) -> MetaData:
    """A MetaData holding just these tables (SQLModel keeps every service's in one)."""
    metadata = MetaData()
    for table in tables:
        table.to_metadata(metadata)
    return metadata


def run_env(target: MetaData, service: str) -> None:
    """The body of a service's Alembic ``env.py`` (online mode only)."""
    url = context.config.attributes["url"]
    # Nothing prepared, no session state: the same migrations run straight to PostgreSQL or
    # through a pooler in transaction mode (docs/operations.md, "Behind PgBouncer").
    engine = make_engine(url, pool_size=1, pooler="transaction")
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=target,
                render_as_batch=connection.dialect.name == "sqlite",
                compare_type=True,
            )
            # Every revision in one transaction (PostgreSQL's DDL is transactional).
            with context.begin_transaction():
                if connection.dialect.name == "postgresql":
                    # Several pods may start migrating at once: one at a time, per service. The
                    # lock is the transaction's, taken before Alembic reads the version, so the
                    # next migrator reads what this one committed; and, unlike a session's
                    # lock, it holds behind a pooler in transaction mode too.
                    lock = zlib.crc32(f"coffer-{service}-migrations".encode())
                    connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock})
                context.run_migrations()
            connection.commit()
    finally:
        engine.dispose()
