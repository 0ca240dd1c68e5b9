"""Migrations 0002 and 0003 on a database that already holds folders and assets (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from coffer_kit import migrate
from coffer_metadata.migrations import HERE
from coffer_testkit.pytest_plugin import new_database_url


@pytest.fixture(params=["sqlite", "postgresql"])
def url_at_0001(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    url = new_database_url(request, request.param, tmp_path, "meta_old")
    migrate.upgrade(HERE, url, "0001")
    return url


def test_existing_rows_get_updated_at_and_a_search_key(url_at_0001: str) -> None:
    created = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    engine = create_engine(url_at_0001)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO folders (id, organization_id, name, created_at)"
                " VALUES ('fld_1', 'org_1', 'F', :t)"
            ),
            {"t": created},
        )
        conn.execute(
            text(
                "INSERT INTO assets (id, organization_id, folder_id, key, name, mime_type, size, sha256,"
                " created_at) VALUES ('ast_1', 'org_1', 'fld_1', 'k', 'Straße.TXT', 'text/plain', 3, :h, :t)"
            ),
            {"t": created, "h": "a" * 64},
        )
    migrate.upgrade(HERE, url_at_0001, "head")
    with engine.connect() as conn:
        asset = conn.execute(text("SELECT created_at, updated_at, name_key, sha256 FROM assets")).one()
        folder = conn.execute(text("SELECT created_at, updated_at FROM folders")).one()
        if conn.dialect.name == "sqlite":  # 0003 indexed the existing names for search
            indexed = conn.execute(
                text(
                    "SELECT assets.id FROM assets_name_search JOIN assets"
                    " ON assets.rowid = assets_name_search.rowid"
                    " WHERE assets_name_search MATCH '\"asse.t\"'"
                )
            ).scalars()
            assert list(indexed) == ["ast_1"]
    engine.dispose()
    assert asset.updated_at == asset.created_at and folder.updated_at == folder.created_at
    assert asset.name_key == "strasse.txt"
    assert asset.sha256 == "a" * 64
