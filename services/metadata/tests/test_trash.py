"""The trash and expiry (issue 47) against the real metadata app, on both databases: the rules
metadata enforces (bounds, quota on restore, who may act, other organizations, expiry once)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlmodel import Session

from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.ids import new_id
from coffer_kit.contract.timeutil import isoformat, utcnow
from coffer_kit.contract.wire import ACTOR_HEADER, SUBTREE_HEADER, SYSTEM, ExpireIn
from coffer_kit.db import make_engine
from coffer_kit.db.engine import writer
from coffer_metadata import trash as T
from coffer_metadata.assets import service as asset_service
from coffer_metadata.folders import service as folder_service
from coffer_testkit.testing import commit_asset

from .support import waiting_on_a_lock

pytestmark = pytest.mark.anyio


def actor(type: str = "key", id: str = "key_a", user_id: str | None = None) -> dict[str, str]:
    body = {"type": type, "id": id, **({"userId": user_id} if user_id else {})}
    return {ACTOR_HEADER: json.dumps(body)}


async def upload(api: httpx.AsyncClient, org: str, size: int, **fields: Any) -> dict[str, Any]:
    response = await commit_asset(api, org, size=size, **fields)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def trash(
    api: httpx.AsyncClient, org: str, asset_id: str, *, limit: int = 10**9, **headers: str
) -> httpx.Response:
    return await api.post(
        f"/internal/v1/orgs/{org}/assets/{asset_id}/trash",
        json={"retentionDays": 7, "limitBytes": limit},
        headers=headers,
    )


async def usage(api: httpx.AsyncClient, org: str) -> dict[str, int]:
    body: dict[str, int] = (await api.get(f"/internal/v1/orgs/{org}/usage")).json()
    return body


async def events(api: httpx.AsyncClient) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = (await api.get("/internal/v1/events/audit-pending?limit=500")).json()[
        "events"
    ]
    return found


async def test_trash_moves_bytes_and_restore_gives_back_the_same_asset(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    folder = (await api.post(f"/internal/v1/orgs/{org}/folders", json={"name": "f"})).json()["id"]
    asset = await upload(api, org, 30, folderId=folder)
    await upload(api, org, 10)
    trashed = await trash(api, org, asset["id"], **actor("user", "usr_1"))
    assert trashed.status_code == 200 and trashed.json()["key"] == asset["key"]
    assert trashed.json()["purged"] == []
    assert await usage(api, org) == {"usedBytes": 10, "assetCount": 1, "trashedBytes": 30, "trashedCount": 1}
    assert (await api.get(f"/internal/v1/orgs/{org}/assets/{asset['id']}")).status_code == 404
    listed = (await api.get(f"/internal/v1/orgs/{org}/assets")).json()
    assert [a["id"] for a in listed["assets"]] != [] and asset["id"] not in [
        a["id"] for a in listed["assets"]
    ]
    page = (await api.get(f"/internal/v1/orgs/{org}/trash")).json()
    assert page["total"] == 1
    entry = page["assets"][0]
    assert entry["id"] == asset["id"] and entry["reason"] == "deleted"
    assert entry["trashedBy"] == {"type": "user", "id": "usr_1", "label": None}
    assert entry["purgeAt"] > entry["trashedAt"]
    # Trashing again is harmless (a retried DELETE).
    assert (await trash(api, org, asset["id"])).json()["key"] == asset["key"]

    restored = await api.post(
        f"/internal/v1/orgs/{org}/trash/{asset['id']}/restore", json={"quotaBytes": 100}
    )
    assert restored.status_code == 200, restored.text
    body = restored.json()
    for field in ("id", "key", "publicUrl", "sha256", "size", "createdAt", "folderId"):
        assert body[field] == asset[field]
    assert await usage(api, org) == {"usedBytes": 40, "assetCount": 2, "trashedBytes": 0, "trashedCount": 0}
    # Restoring a live asset answers it (a restore whose store step failed, retried).
    again = await api.post(f"/internal/v1/orgs/{org}/trash/{asset['id']}/restore", json={"quotaBytes": 100})
    assert again.status_code == 200 and again.json()["id"] == asset["id"]
    kinds = [e["type"] for e in await events(api) if e["data"].get("id") == asset["id"]]
    assert kinds == ["asset.created", "asset.trashed", "asset.restored"]


async def test_restore_goes_to_the_root_when_the_folder_is_gone(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    folder = (await api.post(f"/internal/v1/orgs/{org}/folders", json={"name": "f"})).json()["id"]
    asset = await upload(api, org, 5, folderId=folder)
    await trash(api, org, asset["id"])
    assert (await api.delete(f"/internal/v1/orgs/{org}/folders/{folder}")).status_code == 200
    restored = await api.post(
        f"/internal/v1/orgs/{org}/trash/{asset['id']}/restore", json={"quotaBytes": 100}
    )
    assert restored.status_code == 200 and restored.json()["folderId"] is None


async def test_restore_is_refused_when_it_no_longer_fits(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    asset = await upload(api, org, 60)
    await trash(api, org, asset["id"])
    await upload(api, org, 50, quota=100)
    refused = await api.post(f"/internal/v1/orgs/{org}/trash/{asset['id']}/restore", json={"quotaBytes": 100})
    assert refused.status_code == 413 and refused.json()["error"]["code"] == "quota_exceeded"
    # Nothing changed: still in the trash, usage as it was.
    assert await usage(api, org) == {"usedBytes": 50, "assetCount": 1, "trashedBytes": 60, "trashedCount": 1}
    assert (await api.get(f"/internal/v1/orgs/{org}/trash")).json()["total"] == 1


async def test_the_trash_is_bounded_oldest_purged_first(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    first, second, third = [await upload(api, org, 40) for _ in range(3)]
    for asset in (first, second):
        assert (await trash(api, org, asset["id"], limit=100)).json()["purged"] == []
    over = (await trash(api, org, third["id"], limit=100)).json()
    # 120 > 100: the oldest goes, as a tombstone whose object edge deletes.
    assert over["purged"] == [{"assetId": first["id"], "key": first["key"]}]
    assert await usage(api, org) == {"usedBytes": 0, "assetCount": 0, "trashedBytes": 80, "trashedCount": 2}
    ids = [a["id"] for a in (await api.get(f"/internal/v1/orgs/{org}/trash")).json()["assets"]]
    assert ids == [third["id"], second["id"]]
    purged = [e for e in await events(api) if e["type"] == "asset.purged"]
    assert [e["data"]["id"] for e in purged] == [first["id"]]


async def test_members_act_only_on_what_they_trashed_and_other_orgs_are_refused(
    api: httpx.AsyncClient,
) -> None:
    org, other = new_id("org"), new_id("org")
    mine = await upload(api, org, 1)
    theirs = await upload(api, org, 1)
    await trash(api, org, mine["id"], **actor("key", "key_m", "usr_member"))
    await trash(api, org, theirs["id"], **actor("user", "usr_owner"))
    member = {"onlyUser": "usr_member", "quotaBytes": 100}
    # Told apart from another organization's 403 by its reason (the dashboard shows this one).
    for action in ("restore", "purge"):
        refused = await api.post(f"/internal/v1/orgs/{org}/trash/{theirs['id']}/{action}", json=member)
        assert refused.status_code == 403
        assert refused.json()["error"]["details"] == {"reason": "not_own_deletion"}
    # Another organization: 403 for a real id, 404 for an unknown one.
    elsewhere = await api.post(
        f"/internal/v1/orgs/{other}/trash/{mine['id']}/restore", json={"quotaBytes": 9}
    )
    assert elsewhere.status_code == 403 and "details" not in elsewhere.json()["error"]
    assert (await api.post(f"/internal/v1/orgs/{other}/trash/{mine['id']}/purge", json={})).status_code == 403
    unknown = await api.post(f"/internal/v1/orgs/{org}/trash/{new_id('ast')}/purge", json={})
    assert unknown.status_code == 404
    assert (await api.get(f"/internal/v1/orgs/{other}/trash")).json()["total"] == 0
    # The member's own: restored; the owner's: purged by an owner (no onlyUser).
    assert (
        await api.post(f"/internal/v1/orgs/{org}/trash/{mine['id']}/restore", json=member)
    ).status_code == 200
    ref = await api.post(f"/internal/v1/orgs/{org}/trash/{theirs['id']}/purge", json={})
    assert ref.status_code == 200 and ref.json() == {"assetId": theirs["id"], "key": theirs["key"]}
    # Purged is a tombstone now: asking again answers it (a retry), restoring is 404.
    assert (await api.post(f"/internal/v1/orgs/{org}/trash/{theirs['id']}/purge", json={})).status_code == 200
    gone = await api.post(f"/internal/v1/orgs/{org}/trash/{theirs['id']}/restore", json={"quotaBytes": 9})
    assert gone.status_code == 404


async def test_purge_batches_resume_with_earlier_tombstones(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    assets = [await upload(api, org, 1) for _ in range(5)]
    for asset in assets:
        await trash(api, org, asset["id"])
    first = (await api.post(f"/internal/v1/orgs/{org}/trash/purge?limit=2")).json()
    assert first["purged"] == 2 and first["remaining"] == 3 and len(first["refs"]) == 2
    # The caller died before deleting those objects: the next batch hands them out again first.
    second = (await api.post(f"/internal/v1/orgs/{org}/trash/purge?limit=2")).json()
    assert [r["assetId"] for r in second["refs"][:2]] == [r["assetId"] for r in first["refs"]]
    assert second["purged"] == 2 and second["remaining"] == 1
    for ref in first["refs"] + second["refs"]:
        assert (await api.delete(f"/internal/v1/tombstones/{ref['assetId']}")).status_code == 200
    third = (await api.post(f"/internal/v1/orgs/{org}/trash/purge?limit=2")).json()
    assert third["purged"] == 1 and third["remaining"] == 0
    assert await usage(api, org) == {"usedBytes": 0, "assetCount": 0, "trashedBytes": 0, "trashedCount": 0}


async def test_expiry_is_listed_patched_and_happens_once(api: httpx.AsyncClient, database_url: str) -> None:
    org = new_id("org")
    soon = utcnow() + timedelta(hours=1)
    asset = await upload(api, org, 7, expiresAt=isoformat(soon))
    assert asset["expiresAt"] == isoformat(soon)
    later = await upload(api, org, 1)
    assert later["expiresAt"] is None
    before = isoformat(soon + timedelta(minutes=1))
    page = (await api.get(f"/internal/v1/orgs/{org}/expiring", params={"expiresBefore": before})).json()
    assert [a["id"] for a in page["assets"]] == [asset["id"]] and page["total"] == 1
    bad = await api.get(f"/internal/v1/orgs/{org}/expiring", params={"expiresBefore": "tomorrow"})
    assert bad.status_code == 400
    for value in ("2000-01-01T00:00:00Z", "2026-01-01T00:00:00", "x" * 41, "9999-01-01T00:00:00Z"):
        refused = await api.patch(f"/internal/v1/orgs/{org}/assets/{later['id']}", json={"expiresAt": value})
        assert refused.status_code == 400, value
    # Not yet due: the sweeper's call is 404, nothing changes.
    body = {"retentionDays": 0, "limitBytes": 100}
    assert (
        await api.post(f"/internal/v1/orgs/{org}/assets/{asset['id']}/expire", json=body)
    ).status_code == 404
    # Made due (as time passing would): expired once; a second sweeper finds nothing.
    assert (await api.get("/internal/v1/expired")).json()["assets"] == []
    past = utcnow() - timedelta(seconds=1)
    # (through the database: the API refuses a time in the past)
    engine = make_engine(database_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE assets SET expires_at = :t WHERE id = :i"), {"t": past, "i": asset["id"]})
    engine.dispose()
    due = (await api.get("/internal/v1/expired")).json()["assets"]
    assert due == [{"assetId": asset["id"], "organizationId": org}]
    done = await api.post(f"/internal/v1/orgs/{org}/assets/{asset['id']}/expire", json=body)
    assert done.status_code == 200 and done.json() == {"key": asset["key"], "deleted": True, "purged": []}
    assert (
        await api.post(f"/internal/v1/orgs/{org}/assets/{asset['id']}/expire", json=body)
    ).status_code == 404
    kinds = [e["type"] for e in await events(api) if e["data"].get("id") == asset["id"]]
    assert kinds == ["asset.created", "asset.expired", "asset.deleted"]
    # PATCH sets and clears it, with its event.
    when = isoformat(utcnow() + timedelta(days=2))
    patched = await api.patch(f"/internal/v1/orgs/{org}/assets/{later['id']}", json={"expiresAt": when})
    assert patched.status_code == 200 and patched.json()["expiresAt"] == when
    cleared = await api.patch(f"/internal/v1/orgs/{org}/assets/{later['id']}", json={"expiresAt": None})
    assert cleared.json()["expiresAt"] is None
    updates = [e for e in await events(api) if e["type"] == "asset.updated"]
    assert [e["changes"] for e in updates] == [{"expiresAt": None}, {"expiresAt": when}]


async def test_a_restored_asset_keeps_only_an_expiry_still_to_come(
    api: httpx.AsyncClient, database_url: str
) -> None:
    org = new_id("org")
    later = isoformat(utcnow() + timedelta(hours=1))
    expired = await upload(api, org, 3, expiresAt=later)
    kept = await upload(api, org, 4, expiresAt=later)
    engine = make_engine(database_url)
    with engine.begin() as conn:  # (made due: the API refuses a time in the past)
        conn.execute(
            text("UPDATE assets SET expires_at = :t WHERE id = :i"),
            {"t": utcnow() - timedelta(seconds=1), "i": expired["id"]},
        )
    engine.dispose()
    body = {"retentionDays": 7, "limitBytes": 100}
    done = await api.post(f"/internal/v1/orgs/{org}/assets/{expired['id']}/expire", json=body)
    assert done.status_code == 200, done.text
    await trash(api, org, kept["id"])
    restore = {"quotaBytes": 100}
    back = await api.post(f"/internal/v1/orgs/{org}/trash/{expired['id']}/restore", json=restore)
    assert back.status_code == 200 and back.json()["expiresAt"] is None, back.text
    assert (await api.get(f"/internal/v1/orgs/{org}/assets/{expired['id']}")).json()["expiresAt"] is None
    # No longer due: the next sweep leaves it live.
    assert (await api.get("/internal/v1/expired")).json()["assets"] == []
    again = await api.post(f"/internal/v1/orgs/{org}/assets/{expired['id']}/expire", json=body)
    assert again.status_code == 404
    # An expiry still to come is kept.
    other = await api.post(f"/internal/v1/orgs/{org}/trash/{kept['id']}/restore", json=restore)
    assert other.status_code == 200 and other.json()["expiresAt"] == later
    kinds = [e["type"] for e in await events(api) if e["data"].get("id") == expired["id"]]
    assert kinds == ["asset.created", "asset.expired", "asset.restored"]


async def test_a_subtree_keys_trash_reaches_only_its_subtree(api: httpx.AsyncClient) -> None:
    """Checked in the transaction that trashes: an asset moved out of the key's subtree after
    edge read it is 404 to that key, and stays where it is."""
    org = new_id("org")
    inside, outside = [
        (await api.post(f"/internal/v1/orgs/{org}/folders", json={"name": name})).json()["id"]
        for name in ("inside", "outside")
    ]
    moved = await upload(api, org, 10, folderId=outside)
    kept = await upload(api, org, 10, folderId=inside)
    confined = {SUBTREE_HEADER: inside}
    refused = await trash(api, org, moved["id"], **confined)
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"
    assert (await api.get(f"/internal/v1/orgs/{org}/assets/{moved['id']}")).status_code == 200
    assert (await trash(api, org, kept["id"], **confined)).status_code == 200


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)  # two writers at once
async def test_the_sweepers_purge_spares_an_asset_trashed_again_meanwhile(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    """The sweeper selects a trashed asset past its retention; the owner restores it and
    deletes it again (purgeAt a week ahead) before the sweeper's purge: it was purged at once,
    its bytes deleted. (PostgreSQL: SQLite has one writer at a time.)"""
    org = new_id("org")
    asset = (await commit_asset(api, org, size=10)).json()["id"]
    trashed = await api.post(
        f"/internal/v1/orgs/{org}/assets/{asset}/trash", json={"retentionDays": 7, "limitBytes": 10**9}
    )
    assert trashed.status_code == 200, trashed.text
    with engine.begin() as c:  # its retention has passed
        past = utcnow() - timedelta(minutes=1)
        c.execute(sa.text("UPDATE trashed_assets SET purge_at = :t WHERE id = :i"), {"t": past, "i": asset})

    def restored_and_trashed_again() -> None:
        with Session(writer(engine)) as s:
            T.restore(
                s,
                org_id=org,
                asset_id=asset,
                quota_bytes=10**9,
                only_user=None,
                cdn_url="http://cdn",
                actor=SYSTEM,
            )
            s.commit()
        with Session(writer(engine)) as s:
            T.trash(
                s,
                org_id=org,
                asset_id=asset,
                retention_days=7,
                limit_bytes=10**9,
                cdn_url="http://cdn",
                actor=SYSTEM,
            )
            s.commit()

    with Session(writer(engine)) as s:
        done: list[int] = []

        @sa.event.listens_for(s.connection(), "after_cursor_execute")
        def between(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            if not done and statement.startswith("SELECT") and "trashed_assets.purge_at <=" in statement:
                done.append(1)
                other = threading.Thread(target=restored_and_trashed_again)
                other.start()
                other.join(10)

        refs = T.purge_due(s, cdn_url="http://cdn", limit=100)
        s.commit()
    assert done and asset not in [r.asset_id for r in refs]
    with engine.connect() as c:
        purge_at = c.execute(
            sa.text("SELECT purge_at FROM trashed_assets WHERE id = :i"), {"i": asset}
        ).scalar()
        stone = c.execute(sa.text("SELECT key FROM tombstones WHERE asset_id = :i"), {"i": asset}).scalar()
    assert purge_at is not None and purge_at > utcnow() + timedelta(days=6)  # in the trash, a week ahead
    assert stone is None  # no bytes to delete


def _blocked_on_a_lock(engine: Engine) -> bool:
    with engine.connect() as c:
        waiting = c.execute(
            sa.text(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        ).scalar()
    return bool(waiting)


_CDN: dict[str, Any] = {"cdn_url": "http://cdn", "actor": SYSTEM}
_ON_THE_OLDEST: dict[str, Callable[[Session, str, str], object]] = {
    "purge": lambda s, org, asset: T.purge(s, org_id=org, asset_id=asset, only_user=None, **_CDN),
    "restore": lambda s, org, asset: T.restore(
        s, org_id=org, asset_id=asset, quota_bytes=10**9, only_user=None, **_CDN
    ),
    "sweeper": lambda s, _org, _asset: T.purge_due(s, cdn_url="http://cdn", limit=100),
    "empty the trash": lambda s, org, _asset: T.purge_batch(s, org_id=org, limit=100, **_CDN),
}


def _outcome(engine: Engine, work: Callable[[Session], object]) -> str:
    """``work`` in a transaction of its own: "done", or the code of its error."""
    with Session(writer(engine)) as s:
        try:
            work(s)
            s.commit()
        except CofferError as exc:
            return exc.code
        except sa.exc.DBAPIError as exc:
            return type(exc.orig).__name__
    return "done"


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)  # two writers at once
@pytest.mark.parametrize("other", list(_ON_THE_OLDEST))
async def test_trashing_past_the_bound_never_deadlocks_with_the_oldest_purged_or_restored(
    api: httpx.AsyncClient, engine: Engine, other: str
) -> None:
    """A delete pushes the trash past its bound, and purges its oldest asset, while someone
    purges or restores that one asset (by hand, the sweeper, "empty the trash"). Each locked
    the usage row and the trashed row in the opposite order: PostgreSQL killed one of them as
    a deadlock (a 503). Now both take the usage row first: one waits for the other."""
    org = new_id("org")
    oldest = (await upload(api, org, 10))["id"]
    assert (await trash(api, org, oldest)).status_code == 200
    newest = (await upload(api, org, 10))["id"]
    with engine.begin() as c:  # (for the sweeper: the oldest's retention has passed)
        past = utcnow() - timedelta(minutes=1)
        c.execute(sa.text("UPDATE trashed_assets SET purge_at = :t WHERE id = :i"), {"t": past, "i": oldest})
    outcomes: dict[str, str] = {}

    def trash_the_newest(s: Session) -> object:
        @sa.event.listens_for(s.connection(), "after_cursor_execute")
        def between(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            if acting.ident is None and statement.startswith("UPDATE usage"):
                acting.start()  # while this trashing holds the usage row, before it purges
                deadline = time.monotonic() + 10
                while not _blocked_on_a_lock(engine):  # (polled: until the other one waits for it)
                    assert time.monotonic() < deadline, "the other transaction never waited"
                    time.sleep(0.01)

        return T.trash(s, org_id=org, asset_id=newest, retention_days=7, limit_bytes=10, **_CDN)

    def act_on_the_oldest() -> None:
        outcomes[other] = _outcome(engine, lambda s: _ON_THE_OLDEST[other](s, org, oldest))

    acting = threading.Thread(target=act_on_the_oldest)
    outcomes["trash"] = _outcome(engine, trash_the_newest)
    acting.join(30)
    # The trashing purged the oldest; a restore after it finds nothing to restore.
    assert outcomes == {"trash": "done", other: "not_found" if other == "restore" else "done"}
    with engine.connect() as c:
        left = c.execute(sa.text("SELECT id FROM trashed_assets")).scalars().all()
        stones = c.execute(sa.text("SELECT asset_id FROM tombstones")).scalars().all()
        counted = c.execute(sa.text("SELECT trashed_bytes, trashed_count FROM usage")).one()
    if other == "empty the trash":  # (after the trashing: the newest goes too)
        assert (left, sorted(stones), tuple(counted)) == ([], sorted([oldest, newest]), (0, 0))
    else:
        assert (left, stones, tuple(counted)) == ([newest], [oldest], (10, 1))


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)  # two writers at once
async def test_an_asset_moved_into_a_folder_being_deleted_is_never_a_500(
    api: httpx.AsyncClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PATCH moves an asset into a folder while the folder is deleted: the delete committed
    between the PATCH's check of the folder and its write, and the write failed on the foreign
    key (500). The move now takes turns with folder deletes: the asset goes in, then the delete
    takes it to the root with the folder's other assets."""
    org = new_id("org")
    folder = (await api.post(f"/internal/v1/orgs/{org}/folders", json={"name": "doomed"})).json()["id"]
    asset = (await upload(api, org, 1))["id"]
    checked = asset_service.check_folder

    def delete_the_folder() -> None:
        with Session(writer(engine)) as s:
            folder_service.delete_tree(s, org_id=org, folder_id=folder, actor=SYSTEM)
            s.commit()

    deleting = threading.Thread(target=delete_the_folder)

    def check_then_delete(session: Session, *, org_id: str, folder_id: str) -> None:
        checked(session, org_id=org_id, folder_id=folder_id)
        deleting.start()
        deadline = time.monotonic() + 10
        while deleting.is_alive() and not _blocked_on_a_lock(engine):  # (polled: done, or waiting)
            assert time.monotonic() < deadline, "the delete neither ended nor waited"
            time.sleep(0.01)

    monkeypatch.setattr(asset_service, "check_folder", check_then_delete)
    moved = await api.patch(f"/internal/v1/orgs/{org}/assets/{asset}", json={"folderId": folder})
    deleting.join(30)
    assert moved.status_code == 200, moved.text
    after = await api.get(f"/internal/v1/orgs/{org}/assets/{asset}")
    assert (after.status_code, after.json()["folderId"]) == (200, None)
    assert (await api.get(f"/internal/v1/orgs/{org}/folders/{folder}")).status_code == 404


def _behind(engine: Engine, holder: Session, work: Callable[[], Any]) -> dict[str, Any]:
    """Run ``work`` in a thread until it waits on a lock ``holder`` holds; then commit
    ``holder`` and answer what ``work`` returned or raised."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except CofferError as exc:
            outcome["error"] = exc.code
        except Exception as exc:  # noqa: BLE001 - what the test then shows
            outcome["crash"] = repr(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 10
    while not waiting_on_a_lock(engine):
        assert thread.is_alive(), outcome  # (it must wait for the holder)
        assert time.monotonic() < deadline
        time.sleep(0.01)
    holder.commit()
    holder.close()
    thread.join(10)
    return outcome


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
@pytest.mark.parametrize("retention", [7, 0])
async def test_a_patch_that_moves_the_expiry_as_the_sweep_takes_the_asset_keeps_it(
    api: httpx.AsyncClient, engine: Engine, retention: int
) -> None:
    """The sweep read the row, then deleted it behind the PATCH's lock: the asset whose expiry
    the owner had just moved a day ahead (200) went to the trash as it was before, or, without
    a trash, was deleted for good. SQLite's writers take turns whole: PostgreSQL only."""
    org = new_id("org")
    asset = (await upload(api, org, 10))["id"]
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE assets SET expires_at = :t WHERE id = :i"),
            {"t": utcnow() - timedelta(minutes=1), "i": asset},
        )
    patch = Session(writer(engine))
    change = {"name": "renamed.txt", "folder_id": None, "metadata": {"k": "v"}}
    later = utcnow() + timedelta(days=1)
    asset_service.update(
        patch, org_id=org, asset_id=asset, cdn_url="http://cdn", actor=SYSTEM, expires_at=later, **change
    )
    patch.flush()

    def sweep() -> Any:
        with Session(writer(engine)) as s:
            body = ExpireIn(retention_days=retention, limit_bytes=10**9)
            done = T.expire(s, org_id=org, asset_id=asset, body=body, cdn_url="http://cdn")
            s.commit()
            return done

    assert _behind(engine, patch, sweep) == {"error": "not_found"}  # "has not expired"
    live = (await api.get(f"/internal/v1/orgs/{org}/assets/{asset}")).json()
    kept = (live["name"], live["metadata"], live["expiresAt"])
    assert kept == ("renamed.txt", {"k": "v"}, isoformat(later))
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM trashed_assets")).scalar() == 0
        assert conn.execute(text("SELECT count(*) FROM tombstones")).scalar() == 0


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_a_delete_behind_a_patch_trashes_the_asset_as_the_patch_left_it(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    org = new_id("org")
    asset = (await upload(api, org, 10))["id"]
    patch = Session(writer(engine))
    asset_service.update(
        patch,
        org_id=org,
        asset_id=asset,
        name="renamed.txt",
        folder_id=None,
        metadata={"k": "v"},
        cdn_url="http://cdn",
        actor=SYSTEM,
    )
    patch.flush()

    def delete() -> Any:
        with Session(writer(engine)) as s:
            args = {"retention_days": 7, "limit_bytes": 10**9, "cdn_url": "http://cdn", "actor": SYSTEM}
            done = T.trash(s, org_id=org, asset_id=asset, **args)
            s.commit()
            return done

    assert "value" in _behind(engine, patch, delete)
    [trashed] = (await api.get(f"/internal/v1/orgs/{org}/trash")).json()["assets"]
    assert (trashed["name"], trashed["metadata"]) == ("renamed.txt", {"k": "v"})


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_a_restore_beside_its_folders_delete_restores_to_the_root(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    """The restore checked its folder, then inserted: a folder delete committed between the two
    made the insert fail on the foreign key (a 500). They now take turns (the tree's lock); the
    asset lands at the root."""
    org = new_id("org")
    folder = (await api.post(f"/internal/v1/orgs/{org}/folders", json={"name": "doomed"})).json()["id"]
    asset = (await upload(api, org, 1, folderId=folder))["id"]
    assert (await trash(api, org, asset, **actor())).status_code == 200

    def delete_folder() -> None:
        with Session(writer(engine)) as s:
            folder_service.delete_tree(s, org_id=org, folder_id=folder, actor=SYSTEM)
            s.commit()

    deleting = threading.Thread(target=delete_folder)

    def between(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        """After the restore's check of its folder: the delete, until it commits or waits."""
        if deleting.ident is None and statement.startswith("SELECT folders.id"):
            deleting.start()
            deadline = time.monotonic() + 10
            while deleting.is_alive() and not waiting_on_a_lock(engine):
                assert time.monotonic() < deadline
                time.sleep(0.01)

    sa.event.listen(sa.engine.Engine, "after_cursor_execute", between)
    try:
        restored = await api.post(
            f"/internal/v1/orgs/{org}/trash/{asset}/restore", json={"quotaBytes": 10**9}
        )
    finally:
        sa.event.remove(sa.engine.Engine, "after_cursor_execute", between)
    deleting.join(10)
    assert restored.status_code == 200, restored.text
    assert (await api.get(f"/internal/v1/orgs/{org}/assets/{asset}")).json()["folderId"] is None


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_a_permanent_delete_behind_a_trash_of_the_same_asset_finds_it_gone(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    """The delete read the row without a lock: behind a trash of it, it released the asset's
    size a second time (used bytes below zero: free quota, again and again) and left a
    tombstone, whose protocol deleted the bytes the trashed row still pointed at."""
    org = new_id("org")
    kept = await upload(api, org, 100)
    asset = (await upload(api, org, 300))["id"]
    holder = Session(writer(engine))
    args = {"retention_days": 7, "limit_bytes": 10**9, "cdn_url": "http://cdn", "actor": SYSTEM}
    T.trash(holder, org_id=org, asset_id=asset, **args)
    holder.flush()

    def delete() -> Any:
        with Session(writer(engine)) as s:
            key = asset_service.hide(s, org_id=org, asset_id=asset, cdn_url="http://cdn", actor=SYSTEM)
            s.commit()
            return key

    assert _behind(engine, holder, delete) == {"error": "not_found"}
    assert await usage(api, org) == {
        "usedBytes": kept["size"],
        "assetCount": 1,
        "trashedBytes": 300,
        "trashedCount": 1,
    }
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM tombstones")).scalar() == 0


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_a_restore_behind_a_restore_of_the_same_asset_answers_it_live(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    """The second restore found the trashed row, waited on the usage row's lock for the first,
    then found nothing to take and answered 404 for an asset that was live: a restore of a live
    asset answers it as it is (200)."""
    org = new_id("org")
    asset = (await upload(api, org, 10))["id"]
    assert (await trash(api, org, asset)).status_code == 200
    holder = Session(writer(engine))
    first = _ON_THE_OLDEST["restore"](holder, org, asset)
    holder.flush()

    def restore_again() -> Any:
        with Session(writer(engine)) as s:
            done = _ON_THE_OLDEST["restore"](s, org, asset)
            s.commit()
            return done

    again = _behind(engine, holder, restore_again)
    assert again == {"value": first}
    assert await usage(api, org) == {"usedBytes": 10, "assetCount": 1, "trashedBytes": 0, "trashedCount": 0}
