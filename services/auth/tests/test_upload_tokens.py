"""Upload tokens on real databases (SQLite and PostgreSQL): scope, expiry, single use."""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from coffer_auth import admin, upload_tokens
from coffer_auth.migrations import migrate
from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.ids import new_id
from coffer_kit.contract.wire import UploadGrant
from coffer_kit.db import make_engine, writer
from coffer_testkit.pytest_plugin import new_database_url


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Engine]:
    url = new_database_url(request, request.param, tmp_path, "auth_tokens")
    migrate(url)
    engine = make_engine(url)
    yield engine
    engine.dispose()


def mint(engine: Engine, *, expires_in: int = 600, **scope: Any) -> tuple[str, str]:
    """A new organization and a token of it: (token hash, organization id)."""
    token_hash = hashlib.sha256(secrets.token_bytes(16)).hexdigest()
    with Session(writer(engine), expire_on_commit=False) as s:
        org = admin.create_org(s, name="Acme", quota_bytes=1234)
        upload_tokens.create(
            s,
            org_id=org.id,
            token_hash=token_hash,
            key_id=None,
            folder_id=scope.get("folder_id"),
            name=scope.get("name"),
            max_bytes=scope.get("max_bytes", 100),
            content_types=scope.get("content_types"),
            expires_in=expires_in,
        )
        s.commit()
    return token_hash, org.id


def resolve(engine: Engine, token_hash: str) -> UploadGrant:
    with Session(engine) as s:
        return upload_tokens.resolve(s, token_hash=token_hash)


def test_a_token_resolves_to_its_scope(engine: Engine) -> None:
    token_hash, org = mint(engine, folder_id="fld_x", name="n.png", max_bytes=10, content_types=["image/*"])
    grant = resolve(engine, token_hash)
    assert grant.organization_id == org and grant.quota_bytes == 1234
    assert (grant.folder_id, grant.name, grant.max_bytes) == ("fld_x", "n.png", 10)
    assert grant.content_types == ["image/*"]
    with pytest.raises(CofferError) as unknown:
        resolve(engine, "0" * 64)
    assert unknown.value.status == 401


def test_an_expired_token_is_refused(engine: Engine) -> None:
    token_hash, _ = mint(engine, expires_in=1)
    expires = datetime.fromisoformat(resolve(engine, token_hash).expires_at.replace("Z", "+00:00"))
    while time.time() <= expires.timestamp():  # the clock decides
        time.sleep(0.05)
    with pytest.raises(CofferError) as refused:
        resolve(engine, token_hash)
    assert refused.value.status == 401


def claim(engine: Engine, token_id: str, asset_id: str) -> bool:
    """Whether this upload got the token; any refusal must be 401."""
    try:
        with Session(writer(engine)) as s:
            upload_tokens.claim(s, token_id=token_id, asset_id=asset_id)
            s.commit()
    except CofferError as exc:
        status = exc.status
    else:
        return True
    if status != 401:
        raise AssertionError(f"a lost claim answered {status}, not 401")
    return False


def test_one_claim_of_many_concurrent_wins_and_a_release_gives_it_back(engine: Engine) -> None:
    token_hash, _ = mint(engine)
    token_id = resolve(engine, token_hash).token_id
    assets = [new_id("ast") for _ in range(10)]
    with ThreadPoolExecutor(10) as pool:
        won = list(pool.map(lambda a: claim(engine, token_id, a), assets))
    assert won.count(True) == 1
    with pytest.raises(CofferError):
        resolve(engine, token_hash)  # spent while its upload commits
    winner = assets[won.index(True)]
    with Session(writer(engine)) as s:
        upload_tokens.release(s, token_id=token_id, asset_id=assets[won.index(False)])  # not the holder
        s.commit()
    assert not claim(engine, token_id, new_id("ast"))
    with Session(writer(engine)) as s:
        upload_tokens.release(s, token_id=token_id, asset_id=winner)
        s.commit()
    assert resolve(engine, token_hash).token_id == token_id
    assert claim(engine, token_id, new_id("ast"))
