"""auth on real databases (SQLite and PostgreSQL): schema, keys, passwords, principals."""

from __future__ import annotations

import hashlib

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import Session, select

from coffer_auth import service
from coffer_auth.keys import hash_key
from coffer_auth.migrations import migrate
from coffer_auth.models import TABLES, ApiKey, Role
from coffer_kit.db import make_engine, writer
from coffer_kit.errors import CofferError
from coffer_kit.migrate import metadata_of


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request, tmp_path):
    url = (
        f"sqlite:///{tmp_path / 'auth.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("fresh_database")("auth_unit")
    )
    migrate(url)
    engine = make_engine(url)
    yield engine
    engine.dispose()


def test_migrations_match_the_models(engine) -> None:
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata_of(TABLES)) == []


def test_only_the_hash_of_a_key_is_stored(engine) -> None:
    with Session(writer(engine), expire_on_commit=False) as s:
        org = service.create_org(s, name="Acme", quota_bytes=10)
        row, secret = service.create_key(s, org_id=org.id, user_id=None, name="ci", expires_in=None)
        s.commit()
        stored = s.exec(select(ApiKey)).one()
    assert stored.key_hash == hashlib.sha256(secret.encode()).hexdigest() == hash_key(secret)
    assert secret not in {str(v) for v in stored.model_dump().values()}
    assert stored.prefix == secret[:12]


def test_passwords_are_argon2_hashed(engine) -> None:
    with Session(writer(engine), expire_on_commit=False) as s:
        user = service.create_user(s, email="Ada@Example.com", password="correct horse")
        s.commit()
    assert user.email == "ada@example.com"
    assert user.password_hash.startswith("$argon2")
    assert service.verify_password(user, "correct horse")
    assert not service.verify_password(user, "wrong horse")


def test_principal_refusals(engine) -> None:
    with Session(writer(engine), expire_on_commit=False) as s:
        a = service.create_org(s, name="A", quota_bytes=5)
        b = service.create_org(s, name="B", quota_bytes=7)
        user = service.create_user(s, email="u@example.com", password="password1")
        service.add_member(s, org_id=a.id, user_id=user.id, role=Role.owner)
        service.add_member(s, org_id=b.id, user_id=user.id, role=Role.member)
        _, user_key = service.create_key(s, org_id=a.id, user_id=user.id, name="", expires_in=None)
        s.commit()
        with pytest.raises(CofferError) as refused:
            service.resolve_principal(s, key_hash=hash_key(user_key), organization_id=None)
        assert (refused.value.status, refused.value.code) == (400, "organization_required")
        principal = service.resolve_principal(s, key_hash=hash_key(user_key), organization_id=b.id)
        assert principal["organizationId"] == b.id and principal["quotaBytes"] == 7
        with pytest.raises(CofferError) as unknown:
            service.resolve_principal(s, key_hash="0" * 64, organization_id=None)
        assert unknown.value.status == 401
