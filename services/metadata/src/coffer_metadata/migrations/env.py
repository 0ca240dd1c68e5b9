"""Alembic environment of the metadata database."""

from coffer_kit.migrate import metadata_of, run_env
from coffer_metadata.models import TABLES

run_env(metadata_of(TABLES), "metadata")
