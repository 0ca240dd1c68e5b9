"""The upload's commit is one rule (``assets/repository.py`` ``_COMMIT_CHECKS``, answered by
``assets/service.py`` ``refusal``), whichever way its steps run: one by one through a Session
(SQLite, and PostgreSQL's uncommon cases) or chained into one statement on PostgreSQL's event
loop. Every refusal, and the commit, on each way; a refused commit writes nothing."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session

from coffer_harness.inprocess import truncate_all
from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.ids import ASSET, ORG, TUS_UPLOAD, new_id
from coffer_kit.contract.limits import TUS_EXPIRY_SECONDS
from coffer_kit.contract.timeutil import utcnow
from coffer_kit.contract.wire import Actor
from coffer_kit.db import Database, PgTransaction
from coffer_kit.db.engine import writer
from coffer_metadata.assets import repository, service
from coffer_metadata.folders import service as folders
from coffer_metadata.models import Asset, Event, UploadIntent, Usage
from coffer_testkit.testing import assert_error

from .support import sent_behind

pytestmark = pytest.mark.anyio

ACTOR = Actor(type="key", id="key_test")


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    database = Database.open(database_url)
    yield database
    truncate_all(database.engine)
    await database.aclose()


def _ways(database: Database) -> list[str]:
    """``session`` on both databases; ``loop`` (the chained statement) on PostgreSQL."""
    return ["session", "loop"] if database.engine.dialect.name == "postgresql" else ["session"]


def _session_must_not_run(_: Session) -> Any:
    raise AssertionError("the commit on the event loop left its answer to the Session")


async def _commit(database: Database, way: str, **upload: Any) -> dict[str, Any]:
    """The commit through ``Database.write``, as the route runs it, by ``way`` alone."""
    commit = {"actor": ACTOR, "cdn_url": "http://cdn.test", **upload}
    if way == "session":
        return await database.write(functools.partial(service.commit_upload_view, **commit))

    async def on_loop(transaction: PgTransaction) -> dict[str, Any] | None:
        return await service.commit_upload_view_on_loop(transaction, **commit)

    return await database.write(_session_must_not_run, on_loop=on_loop)


async def _intent(database: Database, org: str, *, reserve: int = 0, quota: int | None = None) -> str:
    asset_id = new_id(ASSET)
    intent = service.NewIntent(
        org_id=org, asset_id=asset_id, max_in_flight=100, reserve_bytes=reserve, quota_bytes=quota
    )
    await database.write(functools.partial(service.register_intent, intent=intent))
    return asset_id


def _upload(
    org: str, asset_id: str, *, size: int, quota: int, folder_id: str | None = None
) -> dict[str, Any]:
    return {
        "org_id": org,
        "asset_id": asset_id,
        "key": f"{org}/{asset_id}/f.bin",
        "name": "f.bin",
        "folder_id": folder_id,
        "mime_type": "application/octet-stream",
        "size": size,
        "sha256": "a" * 64,
        "quota_bytes": quota,
        "visibility": "public",
        "detected_type": None,
        "scan_status": None,
    }


def _state(database: Database, org: str) -> tuple[int, ...]:
    """(stored bytes, asset count, assets, asset.created events, intents) of ``org``."""
    counted = [
        sa.select(sa.func.count()).select_from(table).where(table.c.organization_id == org, *more)
        for table, more in (
            (Asset.__table__, ()),  # type: ignore[attr-defined]
            (Event.__table__, (Event.__table__.c.type == "asset.created",)),  # type: ignore[attr-defined]
            (UploadIntent.__table__, ()),  # type: ignore[attr-defined]
        )
    ]
    with Session(database.engine) as session:
        usage = session.get(Usage, org)
        stored = (usage.used_bytes, usage.asset_count) if usage else (0, 0)
        return (*stored, *(int(session.connection().execute(c).scalar() or 0) for c in counted))


async def _refused(database: Database, way: str, upload: dict[str, Any]) -> CofferError:
    with pytest.raises(CofferError) as refused:
        await _commit(database, way, **upload)
    return refused.value


async def test_every_refusal_of_the_commit_on_every_way(database: Database) -> None:
    for way in _ways(database):
        org, other = new_id(ORG), new_id(ORG)
        mine = await database.write(
            functools.partial(folders.create, org_id=org, name="mine", parent_id=None, actor=ACTOR)
        )
        theirs = await database.write(
            functools.partial(folders.create, org_id=other, name="theirs", parent_id=None, actor=ACTOR)
        )
        stored = await _intent(database, org)
        await _commit(database, way, **_upload(org, stored, size=60, quota=100))
        # Another upload holds 25 bytes for hours (a resumable one's hold: see _HELD_BY_OTHERS).
        with Session(database.engine) as session, session.begin():
            held = _resumable_intent(session, org, reserved=25)
        asset_id = await _intent(database, org)
        before = _state(database, org)
        assert before == (60, 1, 1, 1, 2)

        # The folder: none such (404), another organization's (403), an id no folder has (404).
        for folder_id, status in ((new_id("fld"), 404), (theirs.id, 403), ("fld_\x00", 404)):
            refused = await _refused(
                database, way, _upload(org, asset_id, size=1, quota=100, folder_id=folder_id)
            )
            assert (refused.status, way) == (status, way), refused.message
        # The quota: 60 stored + 25 held + 16 > 100 (413, with what was measured).
        refused = await _refused(database, way, _upload(org, asset_id, size=16, quota=100))
        assert (refused.status, refused.code) == (413, "quota_exceeded")
        assert refused.details == {"usedBytes": 60, "quotaBytes": 100, "requestedBytes": 16}
        assert "hold 25 more bytes" in refused.message
        # No intent (never registered, or swept: 409); the quota is answered first.
        nobody = new_id(ASSET)
        assert (await _refused(database, way, _upload(org, nobody, size=1, quota=100))).status == 409
        assert (await _refused(database, way, _upload(org, nobody, size=16, quota=100))).status == 413
        with Session(database.engine) as session, session.begin():
            session.get(UploadIntent, held).swept = True  # type: ignore[union-attr]
        assert (await _refused(database, way, _upload(org, held, size=1, quota=100))).status == 409
        assert _state(database, org) == before, way  # nothing written by any refusal

        # The commit itself: in the organization's folder, exactly up to the quota.
        asset = await _commit(database, way, **_upload(org, asset_id, size=40, quota=100, folder_id=mine.id))
        assert (asset["id"], asset["folderId"], asset["size"]) == (asset_id, mine.id, 40)
        assert _state(database, org) == (100, 2, 2, 2, 1), way  # the swept intent stays the sweeper's


def _resumable_intent(session: Session, org: str, *, reserved: int) -> str:
    """An active resumable upload's intent (just written) holding ``reserved`` bytes; its asset id."""
    asset_id = new_id(ASSET)
    now = utcnow()
    row = repository.intent_row(
        org_id=org, asset_id=asset_id, key_prefix=f"{org}/{asset_id}/", now=now, reserved_bytes=reserved
    )
    row["expires_at"] = now + timedelta(seconds=TUS_EXPIRY_SECONDS)
    assert repository.add_intent(session, row)
    return asset_id


async def _tus_completion(api: httpx.AsyncClient, org: str, folder: str) -> Any:
    """A resumable upload of 5 bytes into ``folder``, its last byte in: its completion, to send."""
    asset_id = new_id(ASSET)
    created = await api.post(
        f"/internal/v1/orgs/{org}/tus",
        json={
            "id": new_id(TUS_UPLOAD),
            "assetId": asset_id,
            "key": f"{org}/{asset_id}/f.bin",
            "name": "f.bin",
            "mimeType": "application/octet-stream",
            "uploadMetadata": "",
            "length": 5,
            "quotaBytes": 1000,
            "folderId": folder,
        },
    )
    assert created.status_code == 201, created.text
    upload = created.json()["id"]
    lease = {"organizationId": org, "offset": 0, "leaseSeconds": 30}
    token = (await api.post(f"/internal/v1/tus/{upload}/lock", json=lease)).json()["lockToken"]
    done = {"lockToken": token, "fromOffset": 0, "sha256": "b" * 64}
    return functools.partial(api.post, f"/internal/v1/tus/{upload}/complete", json=done)


async def _commit_into(api: httpx.AsyncClient, org: str, folder: str) -> Any:
    """An upload's commit into ``folder`` (its intent registered), to send."""
    asset_id = new_id(ASSET)
    assert (await api.post(f"/internal/v1/orgs/{org}/intents", json={"assetId": asset_id})).status_code == 201
    commit = {
        "id": asset_id,
        "key": f"{org}/{asset_id}/f.bin",
        "filename": "f.bin",
        "mimeType": "application/octet-stream",
        "size": 5,
        "sha256": "a" * 64,
        "quotaBytes": 1000,
        "folderId": folder,
    }
    return functools.partial(api.post, f"/internal/v1/orgs/{org}/assets", json=commit)


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)  # two writers at once
@pytest.mark.parametrize("way", ["tus completion", "folder with an expiry"])
async def test_a_commit_behind_its_folders_delete_is_a_missing_folder_never_a_500(
    api: httpx.AsyncClient, engine: Engine, way: str
) -> None:
    """The commit checked its folder, then inserted: behind a folder delete not yet committed,
    the insert waited on the folder's row and failed on the foreign key once the delete
    committed (a 500). The commits that take the Session's steps (every tus completion, every
    upload into a folder with a default expiry) now take turns with tree changes: 404."""
    org = new_id(ORG)
    expiry = {"expiryDays": 30} if way == "folder with an expiry" else {}
    made = await api.post(f"/internal/v1/orgs/{org}/folders", json={"name": "doomed", **expiry})
    folder = made.json()["id"]
    send = await (_tus_completion if way == "tus completion" else _commit_into)(api, org, folder)
    before = (await api.get(f"/internal/v1/orgs/{org}/usage")).json()
    holder = Session(writer(engine))
    folders.delete_tree(holder, org_id=org, folder_id=folder, actor=ACTOR)
    holder.flush()
    assert_error(await sent_behind(engine, holder, send), 404, "not_found")
    assert (await api.get(f"/internal/v1/orgs/{org}/usage")).json() == before
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM assets")).scalar() == 0
