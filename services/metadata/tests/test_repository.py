"""The queries that matter, on SQLite and PostgreSQL: quota reservation, recursive folder delete."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text
from sqlmodel import Session, select

from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.ids import ASSET, new_id
from coffer_kit.contract.timeutil import utcnow
from coffer_kit.db import writer
from coffer_kit.migrate import metadata_of
from coffer_metadata.assets import repository as assets
from coffer_metadata.assets import service
from coffer_metadata.folders import repository as folders
from coffer_metadata.models import (
    POSTGRESQL_ONLY_INDEXES,
    SQLITE_META_TABLE,
    SQLITE_SEARCH_TABLE,
    SQLITE_TAGS_TABLE,
    TABLES,
    Asset,
    Folder,
    UploadIntent,
    Usage,
)


def test_migrations_match_the_models(engine) -> None:
    def include(_obj, name, _type, _reflected, _compare_to) -> bool:  # type: ignore[no-untyped-def]
        # The trigram index exists on PostgreSQL only (models.Asset); SQLite's own trigram
        # index is a virtual table with shadow tables, outside the models (migration 0003).
        if name.startswith(SQLITE_SEARCH_TABLE) or name in (SQLITE_TAGS_TABLE, SQLITE_META_TABLE):
            return False
        return engine.dialect.name == "postgresql" or name not in POSTGRESQL_ONLY_INDEXES

    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"include_object": include})
        diff = compare_metadata(context, metadata_of(TABLES))
    assert diff == []


def _commit(engine, org: str, size: int, quota: int) -> bool:
    """An upload of ``size`` bytes registered, then committed in a transaction of its own; False
    if the quota refused it."""
    asset_id = new_id(ASSET)
    intent = service.NewIntent(org_id=org, asset_id=asset_id, max_in_flight=100)
    with Session(writer(engine)) as s, s.begin():
        service.register_intent(s, intent=intent)
    upload = {"name": "f", "folder_id": None, "mime_type": "text/plain", "sha256": "0" * 64}
    try:
        with Session(writer(engine)) as s, s.begin():
            key = f"{org}/{asset_id}/f"
            service.commit_upload(
                s, org_id=org, asset_id=asset_id, key=key, size=size, quota_bytes=quota, **upload
            )
    except CofferError as refused:
        if refused.status != 413:
            raise
        return False
    return True


def test_reserve_is_conditional_on_the_quota(engine) -> None:
    assert _commit(engine, "org_a", 60, 100)
    assert not _commit(engine, "org_a", 41, 100)
    assert _commit(engine, "org_a", 40, 100)
    with Session(engine) as s:
        usage = s.get(Usage, "org_a")
        assert (usage.used_bytes, usage.asset_count) == (100, 2)


def test_concurrent_reservations_never_exceed_the_quota(engine) -> None:
    results: list[bool] = []
    barrier = threading.Barrier(16)

    def reserve() -> None:
        barrier.wait()
        results.append(_commit(engine, "org_race", 10, 55))

    threads = [threading.Thread(target=reserve) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 5
    with Session(engine) as s:
        assert s.get(Usage, "org_race").used_bytes == 50


def _folder(s: Session, fid: str, org: str, parent: str | None) -> None:
    now = utcnow()
    s.add(Folder(id=fid, organization_id=org, parent_id=parent, name=fid, created_at=now, updated_at=now))
    s.flush()


def _asset(s: Session, aid: str, org: str, folder: str | None) -> None:
    s.add(
        Asset(
            id=aid,
            organization_id=org,
            folder_id=folder,
            key=f"{org}/{aid}/f",
            name="f",
            mime_type="text/plain",
            size=1,
            sha256="0" * 64,
            created_at=utcnow(),
            updated_at=utcnow(),
            name_key="f",
        )
    )
    s.flush()


def test_delete_tree_is_recursive_scoped_and_moves_assets_to_root(engine) -> None:
    with Session(writer(engine)) as s:
        _folder(s, "a", "org_1", None)
        _folder(s, "b", "org_1", "a")
        _folder(s, "c", "org_1", "b")
        _folder(s, "keep", "org_1", None)
        _folder(s, "other", "org_2", None)
        _asset(s, "in_c", "org_1", "c")
        _asset(s, "in_keep", "org_1", "keep")
        _asset(s, "theirs", "org_2", "other")
        folders.delete_tree(s, org_id="org_2", folder_id="a")  # not theirs: nothing happens
        assert set(s.exec(select(Folder.id))) == {"a", "b", "c", "keep", "other"}
        folders.delete_tree(s, org_id="org_1", folder_id="a")
        s.commit()
        remaining = set(s.exec(select(Folder.id)))
        assert remaining == {"keep", "other"}
        moved = {a.id: a.folder_id for a in s.exec(select(Asset))}
        assert moved == {"in_c": None, "in_keep": "keep", "theirs": "other"}


# PostgreSQL only: SQLite's read transaction is one snapshot, and no isolation level is set.
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_listing_leaves_its_connection_at_the_default_isolation(engine) -> None:
    """A listing reads in one snapshot (REPEATABLE READ on PostgreSQL); the pooled connection
    goes back to READ COMMITTED, which the conditional quota update relies on. (The engine
    is the test's own: both sessions get its one pooled connection.)"""
    level = text("SHOW transaction_isolation")
    with Session(engine) as session:
        assets.one_snapshot(session)
        assert session.connection().execute(level).scalar() == "repeatable read"
    with Session(engine) as session:
        assert session.connection().execute(level).scalar() == "read committed"


# Only PostgreSQL can interleave them: on SQLite the sweeper's transaction holds the one write
# lock from its first statement, and the commit waits for it.
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True, scope="session")
def test_an_intent_committed_while_the_sweeper_claims_it_keeps_its_bytes(engine: Any) -> None:
    """A commit that consumes an intent between the sweeper's read and its mark: the sweeper
    must not answer that intent (edge would delete the bytes of the asset just made)."""
    from datetime import timedelta

    from sqlalchemy import delete, event

    old = utcnow() - timedelta(hours=2)
    committed, abandoned = new_id(ASSET), new_id(ASSET)
    with Session(engine) as session:
        for asset_id in (committed, abandoned):
            session.add(
                UploadIntent(asset_id=asset_id, organization_id="org_x", key=f"k/{asset_id}", created_at=old)
            )
        session.commit()
    with Session(engine) as sweeper:
        connection = sweeper.connection()

        def commit_in_between(_conn: Any, clause: Any, *_: Any) -> None:
            if getattr(clause, "is_select", False) and not getattr(commit_in_between, "done", False):
                commit_in_between.done = True  # type: ignore[attr-defined]
                with engine.begin() as other:  # the upload's commit, on another connection
                    other.execute(delete(UploadIntent).where(UploadIntent.asset_id == committed))  # type: ignore[arg-type]

        event.listen(connection, "after_execute", commit_in_between)
        claimed = assets.claim_stale_intents(
            sweeper, older_than=utcnow() - timedelta(hours=1), now=utcnow(), limit=10
        )
        claimed_ids = [i.asset_id for i in claimed]
        sweeper.commit()
    assert claimed_ids == [abandoned]
