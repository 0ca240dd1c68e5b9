"""Schema management for the metadata database."""

from __future__ import annotations

from coffer_kit.db import make_engine
from sqlmodel import SQLModel

from coffer_metadata.models import TABLES


def migrate(url: str) -> None:
    """Bring the schema up to date (create_all until Alembic revisions land with issue 4)."""
    engine = make_engine(url)
    try:
        SQLModel.metadata.create_all(engine, tables=TABLES)
    finally:
        engine.dispose()
