"""auth tests on real databases: one SQLite file and one PostgreSQL database per session,
migrated once, emptied before each test; the app driven in process through ASGITransport."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from argon2 import PasswordHasher
from pydantic import SecretStr
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from coffer_auth import passwords
from coffer_auth.config import Settings
from coffer_auth.main import create_app
from coffer_auth.migrations import migrate
from coffer_harness.inprocess import truncate_all
from coffer_kit.db import make_engine
from coffer_kit.internal import INTERNAL_TOKEN_HEADER
from coffer_testkit.pytest_plugin import migrated_database_url
from coffer_testkit.testing import app_client

from .support import Api


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "real_argon2: hash with argon2-cffi's production parameters")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A migrated database per backend, for the whole session."""
    return migrated_database_url(request, tmp_path_factory, "auth_unit", migrate)


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """The session's database, emptied first (the app commits, so there is no rollback)."""
    engine = make_engine(database_url, pool_size=2)
    # The previous test's app may still be finishing its start-up sweep (sessions, then audit
    # events, in one transaction) while the tables are emptied in another order: PostgreSQL
    # then ends one of the two as a deadlock victim. The emptying is simply tried again.
    for attempt in range(5):
        try:
            truncate_all(engine)
            break
        except OperationalError:
            if attempt == 4:
                raise
    yield engine
    engine.dispose()


@pytest.fixture(autouse=True)
def cheap_hashing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """argon2id with small parameters: the rules under test stay the same, at 1 ms a hash
    instead of 140 ms. Tests marked ``real_argon2`` keep the production parameters."""
    if request.node.get_closest_marker("real_argon2") is None:
        monkeypatch.setattr(passwords, "HASHER", PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1))
    else:  # the production parameters, even in a worker whose edge tests made hashing cheap for their session
        monkeypatch.setattr(passwords, "HASHER", PasswordHasher())
    monkeypatch.setattr(passwords, "_dummy_hash", None)


def make_settings(database_url: str, tmp_path: Path, **overrides: Any) -> Settings:
    return Settings(
        data_dir=tmp_path,
        auth_database_url=database_url,
        internal_token=SecretStr(secrets.token_urlsafe(32)),
        base_url="https://coffer.test",
        **overrides,
    )


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    """Override in a test module (or with ``@pytest.mark.parametrize``) to change settings."""
    return {}


@pytest.fixture
def settings(
    engine: Engine,  # noqa: ARG001 - requested so that each test starts from an empty database
    database_url: str,
    tmp_path: Path,
    settings_overrides: dict[str, Any],
) -> Settings:
    return make_settings(database_url, tmp_path, **settings_overrides)


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings)
    token = settings.internal_token.get_secret_value() if settings.internal_token else ""
    headers = {INTERNAL_TOKEN_HEADER: token, "x-client-ip": "203.0.113.7", "x-client-user-agent": "pytest"}
    async with app_client(app, "http://auth", headers) as client:
        yield client


@pytest.fixture
def api(client: httpx.AsyncClient) -> Api:
    return Api(client)
