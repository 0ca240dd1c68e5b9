"""metadata tests on real databases: a SQLite file and a fresh PostgreSQL database, migrated."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from coffer_kit.db import make_engine
from coffer_metadata.migrations import migrate


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'metadata.db'}"
    else:
        url = request.getfixturevalue("fresh_database")("meta_unit")
    migrate(url)
    return url


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()
