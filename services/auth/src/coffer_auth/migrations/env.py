"""Alembic environment of the auth database."""

from coffer_auth.models import TABLES
from coffer_kit.migrate import metadata_of, run_env

run_env(metadata_of(TABLES), "auth")
