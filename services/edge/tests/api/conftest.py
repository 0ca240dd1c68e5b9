"""The public API's rules, tested in process: the four services' real apps on real databases
(SQLite and PostgreSQL, migrated once per session), served on loopback from this process
(coffer_harness.inprocess). Tables are emptied after every test."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from argon2 import PasswordHasher

from coffer_auth import passwords
from coffer_harness.inprocess import API_TEST_SETTINGS, InProcessStack, new_stack, serving


@pytest.fixture(scope="session", autouse=True)
def _cheap_hashing() -> Iterator[None]:
    """argon2id with small parameters, as in auth's own tests (services/auth/tests/conftest.py):
    the rules under test stay the same, at 1 ms a hash instead of 140 ms. The sign-ups, sign-ins
    and ``create-user`` calls of these tests hashed about 2,000 passwords a run."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(passwords, "HASHER", PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1))
        patch.setattr(passwords, "_dummy_hash", None)
        yield


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[InProcessStack]:
    root = tmp_path_factory.mktemp(f"inprocess-{request.param}")
    if request.param == "sqlite":
        urls = {"auth": f"sqlite:///{root / 'auth.db'}", "metadata": f"sqlite:///{root / 'metadata.db'}"}
    else:
        fresh_database: Any = request.getfixturevalue("fresh_database")
        urls = {"auth": fresh_database("api_auth"), "metadata": fresh_database("api_metadata")}
    s = new_stack(root, auth_database_url=urls["auth"], metadata_database_url=urls["metadata"])
    with serving(s, secrets.token_urlsafe(24), **API_TEST_SETTINGS):
        yield s


@pytest.fixture(autouse=True)
def _empty_tables(stack: InProcessStack) -> Iterator[None]:
    yield
    stack.truncate()
