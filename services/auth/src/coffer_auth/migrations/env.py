"""Alembic environment of the auth database."""

from coffer_kit.migrate import metadata_of, run_env

from coffer_auth.models import TABLES

run_env(metadata_of(TABLES), "auth")
