"""The metadata database's schema, as Alembic revisions (SQLite and PostgreSQL alike)."""

from pathlib import Path

from coffer_kit import migrate as _migrate

HERE = Path(__file__).parent


def migrate(url: str) -> None:
    """Upgrade the metadata database at ``url`` to the latest revision."""
    _migrate.upgrade(HERE, url)
