"""Alembic environment of the auth database."""

from coffer_auth.models import all_tables
from coffer_kit.migrate import metadata_of, run_env

run_env(metadata_of(all_tables()), "auth")
