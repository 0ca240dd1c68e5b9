"""Schema management for the auth database."""

from __future__ import annotations

from coffer_kit.db import make_engine
from sqlmodel import SQLModel

from coffer_auth.models import ApiKey, Membership, Organization, User

TABLES = [User.__table__, Organization.__table__, Membership.__table__, ApiKey.__table__]


def migrate(url: str) -> None:
    """Bring the schema up to date (create_all until Alembic revisions land with issue 4)."""
    engine = make_engine(url)
    try:
        SQLModel.metadata.create_all(engine, tables=TABLES)  # type: ignore[arg-type]
    finally:
        engine.dispose()
