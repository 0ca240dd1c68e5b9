"""auth on real databases (SQLite and PostgreSQL): schema, keys, passwords, principals.

The ``engine`` fixture (conftest) is each backend's session database, migrated once and
emptied before each test."""

from __future__ import annotations

import hashlib

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import Session, select

from coffer_auth import admin, passwords
from coffer_auth.keys import hash_key
from coffer_auth.models import ApiKey, Role, all_tables
from coffer_kit.contract.errors import CofferError
from coffer_kit.db import writer
from coffer_kit.migrate import metadata_of
from coffer_testkit.pytest_plugin import new_database_url


def test_migrations_match_the_models(engine) -> None:
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata_of(all_tables())) == []


def test_only_the_hash_of_a_key_is_stored(engine) -> None:
    with Session(writer(engine), expire_on_commit=False) as s:
        org = admin.create_org(s, name="Acme", quota_bytes=10)
        _row, secret = admin.create_key(s, org_id=org.id, user_id=None, name="ci", expires_in=None)
        s.commit()
        stored = s.exec(select(ApiKey)).one()
    assert stored.key_hash == hashlib.sha256(secret.encode()).hexdigest() == hash_key(secret)
    assert secret not in {str(v) for v in stored.model_dump().values()}
    assert stored.prefix == secret[:12]


def test_passwords_are_argon2_hashed(engine) -> None:
    with Session(writer(engine), expire_on_commit=False) as s:
        user = admin.create_user(s, email="Ada@Example.com", password="correct horse")
        s.commit()
    assert user.email == "ada@example.com"
    assert user.password_hash.startswith("$argon2")
    assert passwords.verify(user.password_hash, "correct horse")[0]
    assert not passwords.verify(user.password_hash, "wrong horse")[0]


def test_principal_refusals(engine) -> None:
    with Session(writer(engine), expire_on_commit=False) as s:
        a = admin.create_org(s, name="A", quota_bytes=5)
        b = admin.create_org(s, name="B", quota_bytes=7)
        user = admin.create_user(s, email="u@example.com", password="password1")
        admin.add_member(s, org_id=a.id, user_id=user.id, role=Role.owner)
        admin.add_member(s, org_id=b.id, user_id=user.id, role=Role.member)
        _, user_key = admin.create_key(s, org_id=a.id, user_id=user.id, name="", expires_in=None)
        s.commit()
        with pytest.raises(CofferError) as refused:
            admin.resolve_principal(s, key_hash=hash_key(user_key), organization_id=None)
        assert (refused.value.status, refused.value.code) == (400, "organization_required")
        principal = admin.resolve_principal(s, key_hash=hash_key(user_key), organization_id=b.id).principal
        assert principal.organization_id == b.id and principal.quota_bytes == 7
        with pytest.raises(CofferError) as unknown:
            admin.resolve_principal(s, key_hash="0" * 64, organization_id=None)
        assert unknown.value.status == 401


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_migration_0002_keeps_existing_rows_and_goes_back(
    backend: str, tmp_path, request: pytest.FixtureRequest
) -> None:
    """Upgrading a database that has users and keys: every old row gets the new columns'
    defaults; downgrading to 0001 and upgrading again works."""
    from alembic import command
    from sqlalchemy import inspect, text

    from coffer_auth.migrations import HERE
    from coffer_kit.db import make_engine
    from coffer_kit.migrate import config

    url = new_database_url(request, backend, tmp_path, "auth_mig")
    cfg = config(HERE, url)
    command.upgrade(cfg, "0001")
    engine = make_engine(url, pool_size=1)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO users (id, email, password_hash, created_at) "
                    "VALUES ('usr_1', 'a@example.com', 'x', CURRENT_TIMESTAMP)"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO organizations (id, name, quota_bytes, created_at) "
                    "VALUES ('org_1', 'A', 1, CURRENT_TIMESTAMP)"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO api_keys (id, key_hash, prefix, kind, name, organization_id, created_at) "
                    "VALUES ('key_1', :h, 'cof_org_abcd', 'organization', '', 'org_1', CURRENT_TIMESTAMP)"
                ),
                {"h": "0" * 64},
            )
        command.upgrade(cfg, "0002")
        with engine.connect() as conn:
            user = conn.execute(text("SELECT failed_logins, login_blocked_until FROM users")).one()
            key = conn.execute(text("SELECT created_by_user_id FROM api_keys")).one()
        assert tuple(user) == (0, None) and tuple(key) == (None,)
        command.upgrade(cfg, "head")
        assert "failed_logins" not in {c["name"] for c in inspect(engine).get_columns("users")}
        command.downgrade(cfg, "0001")
        assert "sessions" not in inspect(engine).get_table_names()
        command.upgrade(cfg, "head")
        assert {"sessions", "invitations", "password_resets", "audit_events"} <= set(
            inspect(engine).get_table_names()
        )
    finally:
        engine.dispose()
