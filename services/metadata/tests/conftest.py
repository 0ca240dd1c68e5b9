"""metadata tests on real databases: a SQLite file and a fresh PostgreSQL database, migrated."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy.engine import Engine

from coffer_harness.inprocess import truncate_all
from coffer_kit.db import make_engine
from coffer_kit.internal import INTERNAL_TOKEN_HEADER
from coffer_metadata.config import Settings
from coffer_metadata.main import create_app
from coffer_metadata.migrations import migrate
from coffer_testkit.pytest_plugin import migrated_database_url
from coffer_testkit.testing import app_client


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A database of each kind, migrated once for the session."""
    return migrated_database_url(request, tmp_path_factory, "meta_unit", migrate)


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """An engine on the session's database, emptied after the test."""
    engine = make_engine(database_url)
    yield engine
    truncate_all(engine)
    engine.dispose()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def metadata_app(
    database_url: str, tmp_path: Any
) -> Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]]:
    """The real metadata app on the migrated database, called in process, with these settings
    changed (``metadata_app(metadata_max_uploads_in_flight=3)``)."""

    @asynccontextmanager
    async def make(**changed: Any) -> AsyncIterator[httpx.AsyncClient]:
        token = secrets.token_urlsafe(24)
        settings = Settings(
            metadata_database_url=database_url,
            data_dir=tmp_path,
            internal_token=SecretStr(token),
            cdn_url="http://cdn.test",
            **changed,
        )
        async with app_client(
            create_app(settings), "http://metadata", {INTERNAL_TOKEN_HEADER: token}
        ) as client:
            yield client

    return make


@pytest.fixture
async def api(
    metadata_app: Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]], database_url: str
) -> AsyncIterator[httpx.AsyncClient]:
    """The real metadata app on the migrated database, called in process."""
    async with metadata_app() as client:
        yield client
    # The database is the session's: leave it empty for the next test.
    engine = make_engine(database_url)
    truncate_all(engine)
    engine.dispose()
